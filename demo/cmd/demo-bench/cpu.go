package main

import "time"

// notMeasured is what the report prints for a figure this OS does not give
// (CPU times and memory are read from /proc, on Linux only).
const notMeasured = "not measured on this OS"

// cpuTimes is CPU time (user + system) consumed so far by the servers, by
// the PostgreSQL cluster (the postmaster and its children) and by this
// process (the load generator).
type cpuTimes struct {
	server, postgres, client time.Duration
	machine                  time.Duration // every process and the kernel
}

func (a cpuTimes) sub(b cpuTimes) cpuTimes {
	return cpuTimes{server: a.server - b.server, postgres: a.postgres - b.postgres, client: a.client - b.client,
		machine: a.machine - b.machine}
}

// cpuMeter samples the CPU time of the server processes (the demo-api and
// the baseline server: the idle one adds next to nothing) and of one
// cluster. Its sample is zero where cpuMeasured is false.
type cpuMeter struct {
	serverPids    []int
	postmasterPid int
}
