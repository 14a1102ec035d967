package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redislock/redislock"
	"github.com/redislock/redislock/internal/redistest"
)

// BenchmarkFamilyFloor measures the least server work a correct lock cycle
// can cost, for one name and for three taken all or none, beside ours (see
// BenchmarkFamilyServerWork): the floor cycles send a SET NX PX (one name)
// or one script of three SET NX PX (all or none, undone at the first name
// taken), then one script that deletes the keys that still hold the
// token. (Ours, uncontended, sends the three SET NX PX themselves, and
// such a script only when one finds its name taken: see AcquireMulti.) They have no queue, no fence, no
// lone-holder test and no hand-over, and run on raw go-redis (its pool;
// ours batches), so their ratio is the cost of the two extra names alone:
//
//	go test -run '^$' -bench '^BenchmarkFamilyFloor$' -benchtime 20000x .
func BenchmarkFamilyFloor(b *testing.B) {
	srv := redistest.Start(b)
	admin := newGoRedis(srv.Addr(), nil)
	defer admin.Close()
	for _, goroutines := range []int{1, 16} {
		for _, c := range []cycler{floorCycler("exclusive-floor", 1), floorCycler("multi3-floor", 3)} {
			b.Run("goroutines="+strconv.Itoa(goroutines)+"/kind="+c.name, func(b *testing.B) {
				serverWorkRun(b, admin, c, srv.Addr(), goroutines)
			})
		}
	}
}

var (
	// floorTake: every key in KEYS with SET NX PX, or none: 1, or 0 with
	// the keys this call set deleted.
	floorTake = redis.NewScript(`for i, key in ipairs(KEYS) do
  if not redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    if i > 1 then
      redis.call('DEL', unpack(KEYS, 1, i - 1))
    end
    return 0
  end
end
return 1`)
	// floorRelease: deletes the keys in KEYS that hold ARGV[1]; how many.
	floorRelease = redis.NewScript(`local ours = {}
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    ours[#ours + 1] = key
  end
end
if #ours == 0 then
  return 0
end
return redis.call('DEL', unpack(ours))`)
)

// floorCycler is a floor cycle (see BenchmarkFamilyFloor) on n names: a
// plain SET for one, floorTake for more; floorRelease after.
func floorCycler(name string, n int) cycler {
	return cycler{name, func(addr string) (func(context.Context, string) error, func() error, error) {
		rdb := newGoRedis(addr, nil)
		return func(ctx context.Context, lock string) error {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = "{" + lock + ":" + strconv.Itoa(i) + "}"
			}
			token := rand.Text()
			var took bool
			if n == 1 {
				ok, err := rdb.SetNX(ctx, keys[0], token, redislock.DefaultTTL).Result()
				if err != nil {
					return err
				}
				took = ok
			} else {
				v, err := floorTake.Run(ctx, rdb, keys, token, redislock.DefaultTTL.Milliseconds()).Int()
				if err != nil {
					return err
				}
				took = v == 1
			}
			if !took {
				return errors.New("floor: a fresh name was taken")
			}
			return floorRelease.Run(ctx, rdb, keys, token).Err()
		}, rdb.Close, nil
	}}
}
