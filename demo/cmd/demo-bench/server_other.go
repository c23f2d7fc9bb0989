//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux kills a child with its parent.
// The bench stops its servers when it returns, also on Ctrl-C; a bench that
// is killed outright leaves them running until they are stopped by hand.
func dieWithParent(*exec.Cmd) {}
