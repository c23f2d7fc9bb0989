//go:build !unix

package httpapi_test

import "time"

// cpuTime is not measured here: cpu-µs/op reads 0.
func cpuTime() time.Duration { return 0 }
