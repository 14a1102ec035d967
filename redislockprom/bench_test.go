package redislockprom_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/redislockprom"
)

// BenchmarkObserve measures what the Observer adds to one lock's life:
// an acquisition, an extension and a release, with and without the name
// label. Run: go test -run '^$' -bench Observe -benchmem .
func BenchmarkObserve(b *testing.B) {
	for _, named := range []bool{false, true} {
		title := "name off"
		if named {
			title = "name on"
		}
		b.Run(title, func(b *testing.B) {
			obs := benchObserver(b, named)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					obs.ObserveAcquire(redislock.AcquireEvent{Name: "job", Acquired: true, Wait: time.Millisecond, Attempts: 1})
					obs.ObserveExtend(redislock.ExtendEvent{Name: "job", Latency: 300 * time.Microsecond, Watchdog: true})
					obs.ObserveRelease(redislock.ReleaseEvent{Name: "job", HeldFor: time.Second})
				}
			})
		})
	}
	b.Run("hold began and ended", func(b *testing.B) {
		obs := benchObserver(b, false)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				obs.ObserveHold(redislock.HoldEvent{Name: "job", Kind: "lock", Began: true})
				obs.ObserveHold(redislock.HoldEvent{Name: "job", Kind: "lock"})
			}
		})
	})
	b.Run("not acquired", func(b *testing.B) {
		obs := benchObserver(b, false)
		err := errors.Join(redislock.ErrNotAcquired)
		b.ReportAllocs()
		for b.Loop() {
			obs.ObserveAcquire(redislock.AcquireEvent{Name: "job", Wait: time.Millisecond, Attempts: 1, Err: err})
		}
	})
}

func benchObserver(b *testing.B, named bool) *redislockprom.Observer {
	var opts []redislockprom.Option
	if named {
		opts = append(opts, redislockprom.WithNameLabel())
	}
	obs, err := redislockprom.New(prometheus.NewRegistry(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	return obs
}
