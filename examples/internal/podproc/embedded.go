package podproc

import (
	"time"

	"github.com/alicebob/miniredis/v2"
)

// EmbeddedRedis starts an in-memory Redis on 127.0.0.1 whose keys expire
// with real time, as on a server, and returns its address and the function
// that stops it.
//
// miniredis's own clock would also move while a script runs (a key could
// expire between two commands of one script, which a real Redis never
// does), so the clock is set from here instead: every millisecond, and
// never in the middle of a script.
func EmbeddedRedis() (addr string, stop func(), err error) {
	mini := miniredis.NewMiniRedis()
	if err := mini.Start(); err != nil {
		return "", nil, err
	}
	mini.ClockTTL(true)
	mini.SetTime(time.Now())
	stopClock, clockDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(clockDone)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case now := <-tick.C:
				mini.SetTime(now)
			case <-stopClock:
				return
			}
		}
	}()
	return mini.Addr(), func() {
		close(stopClock)
		<-clockDone
		mini.Close()
	}, nil
}
