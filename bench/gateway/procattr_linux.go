package main

import (
	"os/exec"
	"syscall"
)

// endWithParent makes the kernel kill the child when the harness dies, so a
// killed run leaves no gateway listening.
func endWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
