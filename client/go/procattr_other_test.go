//go:build !linux

package opreg_test

import "os/exec"

func setParentDeathSignal(cmd *exec.Cmd) {}
