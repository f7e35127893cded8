package opreg_test

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal: the child gets SIGTERM if the test process dies
// (a go test timeout, say), so no server or proxy is left behind.
func setParentDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}
