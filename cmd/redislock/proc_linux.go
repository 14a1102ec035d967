package main

import "syscall"

// childSysProcAttr puts the command in its own process group, so that
// signals sent to the group reach every process it starts, and has the
// kernel SIGKILL it should redislock die without cleaning up (SIGKILL,
// OOM killer): the lock's watchdog dies with redislock, so the command must
// not outlive it.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
