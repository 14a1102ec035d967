//go:build unix && !linux

package podproc

import "syscall"

// SysProcAttr puts a pod in a process group of its own (see the Linux
// version for why).
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
