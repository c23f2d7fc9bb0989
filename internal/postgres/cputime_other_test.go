//go:build !unix

package postgres_test

import "time"

// cpuTime is not measured here: cpu-µs/op reads 0.
func cpuTime() time.Duration { return 0 }
