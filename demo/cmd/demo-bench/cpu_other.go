//go:build !linux

package main

import (
	"context"
	"errors"
)

// cpuMeasured says whether this OS gives the CPU and memory figures: they
// are read from /proc, so elsewhere the report says "not measured on this OS".
const cpuMeasured = false

var errNotMeasured = errors.New(notMeasured)

func postmasterPid(context.Context, *statsDB) (int, error) { return 0, errNotMeasured }

func (m *cpuMeter) sample() cpuTimes { return cpuTimes{} }

func memory(pid int) (peak, current int64, err error) { return 0, 0, errNotMeasured }
