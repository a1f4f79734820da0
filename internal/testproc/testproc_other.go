//go:build !linux

package testproc

import "os/exec"

// DieWithParent does nothing where Linux's parent-death signal is not
// to be had: a crashed test binary's helpers there are left running.
func DieWithParent(cmd *exec.Cmd) {}
