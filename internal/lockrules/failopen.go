package lockrules

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// unavailable are the replies of a Redis that is there but cannot serve
// now: fail open may run without it. Not TRYAGAIN: a cluster migrating the
// lock's slot is there and will answer again; running without the lock
// then is not what fail open is for.
var unavailable = []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "BUSY"}

// Unreachable tells a Redis that could not be reached or could not serve
// (fail open may run without it) from every other error: one of verdicts
// (the library's own answers, such as the lock being held or bad input),
// and replies such as WRONGTYPE, NOPERM or TRYAGAIN, which say Redis
// answered.
func Unreachable(err error, verdicts ...error) bool {
	if err == nil {
		return false
	}
	for _, v := range verdicts {
		if errors.Is(err, v) {
			return false
		}
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		for _, prefix := range unavailable {
			if redis.HasErrorPrefix(err, prefix) {
				return true
			}
		}
		return false
	}
	return true
}
