//go:build !linux

package main

import "os/exec"

// endWithParent does nothing here: only Linux can tie a child's life to its
// parent's, so a harness killed outright may leave its children running.
// An interrupted one still stops them.
func endWithParent(cmd *exec.Cmd) {}
