package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill the server when this process dies, so
// an interrupted bench leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
