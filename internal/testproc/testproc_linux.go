package testproc

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes cmd, before it is started, get SIGKILL when the
// process that starts it ends (Linux's parent-death signal). Linux
// sends it when the thread that started cmd exits, and a Go thread
// exits before its process only when a goroutine locked to it
// (runtime.LockOSThread) returns without unlocking: no test helper does,
// and the one place in Caddy that does (binding a privileged port
// refused with EACCES) is not reached by tests, which bind high ports
// on loopback.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
