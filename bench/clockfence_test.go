package bench

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// rawClockFencedAcquire is the hand-written counterpart of our fenced
// acquire since issue 14: SET NX PX and, when it won, INCR of the counter
// raised to the server's clock in microseconds, in one script. It is what a
// user who wants fences that survive a lost counter would write.
var rawClockFencedAcquire = redis.NewScript(`if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local fence = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if fence < now then
  redis.call('SET', KEYS[2], string.format('%d', now))
  fence = now
end
return fence`)

func openRawClockFencedCycle(addr string) (func(context.Context, string) error, func() error, error) {
	rdb := newGoRedis(addr, nil)
	ctx := context.Background()
	if err := loadRawScripts(ctx, rdb); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	if err := rawClockFencedAcquire.Load(ctx, rdb).Err(); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return func(ctx context.Context, name string) error {
		token := rand.Text()
		fence, err := rawClockFencedAcquire.EvalSha(ctx, rdb, []string{name, name + ":fence"}, token, uncontendedTTL.Milliseconds()).Int64()
		if err != nil {
			return err
		}
		if fence == 0 {
			return errRawHeld
		}
		return rawReleaseOwn(ctx, rdb, name, token)
	}, rdb.Close, nil
}

// BenchmarkClockFencing compares our fenced cycle with the hand-written
// ones in interleaved rounds (see BenchmarkInterleaved): raw-fenced (SET
// and INCR in one script: fences that go backwards when the counter is
// lost) and raw-clock-fenced (the same raised to the server's clock, as
// ours does since issue 14). ours-fenced/raw-clock-fenced is the like-for-
// like ratio; ours-fenced/raw-fenced includes the clock's own cost:
//
//	go test -run '^$' -bench '^BenchmarkClockFencing$' -benchtime 40x -count 3 .
func BenchmarkClockFencing(b *testing.B) {
	srv := redistest.Start(b)
	libs := []cycler{
		{"raw", openRawCycle},
		{"raw-fenced", openRawFencedCycle},
		{"raw-clock-fenced", openRawClockFencedCycle},
		{"ours-fenced", openOursCycle(redislock.WithFencing())},
	}
	medians := interleave(b, srv.Addr(), libs)
	b.ReportMetric(medians[2]/medians[1], "raw-clock-fenced/raw-fenced")
	b.ReportMetric(medians[3]/medians[1], "ours-fenced/raw-fenced")
	b.ReportMetric(medians[3]/medians[2], "ours-fenced/raw-clock-fenced")
}
