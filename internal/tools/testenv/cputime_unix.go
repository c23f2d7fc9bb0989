//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// CPUTime is this process's CPU time, user and system, for benchmarks
// that report CPU per operation beside the wall time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
