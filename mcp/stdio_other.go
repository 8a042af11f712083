//go:build !linux

package reboundmcp

import "syscall"

// dieWithParent does nothing: there is no parent-death signal but
// Linux's (FreeBSD's is untried). A server whose rebound was killed with
// SIGKILL sees its stdin close, as every stdio server's client may close
// it, and most servers exit then; one that does not runs on.
func dieWithParent(*syscall.SysProcAttr) {}
