//go:build unix

package podproc

import (
	"os"
	"os/signal"
	"syscall"
)

// Freeze stops the calling process with SIGSTOP, as a long GC pause or a
// frozen VM would: every thread stops, the lock's watchdog and timers
// included. It returns once the process has been sent SIGCONT.
//
// The stop is asynchronous (another thread of the process may be the one
// to take SIGSTOP, and it may wait for a CPU), so the caller goes on only
// once SIGCONT has come: nothing of its work runs between the freeze and
// the wake-up, even on a loaded machine.
func Freeze() error {
	continued := make(chan os.Signal, 1)
	signal.Notify(continued, syscall.SIGCONT)
	defer signal.Stop(continued)
	if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
		return err
	}
	<-continued
	return nil
}
