package podproc

import "syscall"

// SysProcAttr puts a pod in a process group of its own, and kills it if
// the runner dies (so no pod is left stopped or waiting).
//
// A group of its own: a stopped process whose group is orphaned (its parent
// outside the group and the session) is sent SIGHUP and SIGCONT by the
// kernel, which would end a freeze early. A pod's parent is the runner, in
// the same session, for as long as it lives.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
