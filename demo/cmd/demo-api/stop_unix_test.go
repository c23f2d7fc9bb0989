//go:build unix

package main

import (
	"os"
	"syscall"
)

// stopProcess stops p (SIGSTOP) where it is, its connections kept open.
func stopProcess(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
