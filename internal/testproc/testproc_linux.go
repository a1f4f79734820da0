package testproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd, before it is started, get SIGKILL when the
// process that starts it ends (Linux's parent-death signal, sent when
// the starting thread exits; Go's threads end only with their process
// unless a goroutine locked to one returns, which the test helpers do
// not do).
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
