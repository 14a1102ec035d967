//go:build unix && !linux

package main

import "syscall"

// childSysProcAttr puts the command in its own process group, so that
// signals sent to the group reach every process it starts. Outside Linux
// there is no parent-death signal: a redislock killed with SIGKILL leaves
// the command running.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
