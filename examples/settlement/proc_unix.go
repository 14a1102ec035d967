//go:build unix && !linux

package main

import "syscall"

// podSysProcAttr puts a pod in a process group of its own.
func podSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
