package main

import "syscall"

// podSysProcAttr puts a pod in a process group of its own, and kills it if
// the runner dies (so no pod is left stopped or waiting).
func podSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
