package redislock

import (
	"math/rand/v2"
	"time"
)

// A RetryStrategy says how long to wait between attempts to acquire a lock
// someone else holds; stateless, one value may be shared by goroutines. A
// waiter never sleeps past the holder's lease end or its ctx's deadline (and
// without one, not longer than MaxWaitWithoutDeadline in all).
type RetryStrategy interface {
	// NextBackoff returns the wait before retry number attempt (1 for the
	// first retry, after the first failed attempt), or false to give up.
	// A negative wait counts as zero.
	NextBackoff(attempt int) (time.Duration, bool)
}

type noRetry struct{}

func (noRetry) NextBackoff(int) (time.Duration, bool) { return 0, false }

// NoRetry makes one attempt and gives up: the default.
func NoRetry() RetryStrategy { return noRetry{} }

type linearBackoff struct{ interval time.Duration }

func (s linearBackoff) NextBackoff(int) (time.Duration, bool) { return s.interval, true }

func (s linearBackoff) validate() error {
	return invalidIf(s.interval <= 0, "LinearBackoff interval %v must be positive", s.interval)
}

// LinearBackoff retries every d (d > 0), until the context ends or the
// waiting cap is reached. Combine with LimitRetry to bound the attempts.
func LinearBackoff(d time.Duration) RetryStrategy { return linearBackoff{d} }

type exponentialBackoff struct{ min, max time.Duration }

func (s exponentialBackoff) NextBackoff(attempt int) (time.Duration, bool) {
	if s.validate() != nil {
		// Only when a caller's own strategy wraps an invalid one: give up.
		return 0, false
	}
	// The ceiling: min doubled attempt-1 times while that stays below max
	// (attempt < 63 and grown > 0: no shift that overflows counts).
	ceiling := s.max
	if grown := s.min << (max(attempt, 1) - 1); attempt < 63 && grown > 0 && grown < ceiling {
		ceiling = grown
	}
	// Full jitter, so that waiters that failed together do not retry together.
	return s.min + rand.N(ceiling-s.min+1), true
}

func (s exponentialBackoff) validate() error {
	return invalidIf(s.min <= 0 || s.max < s.min, "ExponentialBackoff(%v, %v) needs 0 < min <= max", s.min, s.max)
}

// ExponentialBackoff retries after a random wait between min and a ceiling
// that doubles with every attempt, from min up to max (full jitter). It
// needs 0 < min <= max.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	return exponentialBackoff{min, max}
}

type limitRetry struct {
	s        RetryStrategy
	attempts int
}

func (s limitRetry) NextBackoff(attempt int) (time.Duration, bool) {
	if attempt > s.attempts {
		return 0, false
	}
	return s.s.NextBackoff(attempt)
}

func (s limitRetry) validate() error {
	if s.s == nil {
		return invalidf("LimitRetry of a nil strategy")
	}
	if s.attempts < 0 {
		return invalidf("LimitRetry attempts %d must not be negative", s.attempts)
	}
	return validStrategy(s.s)
}

// validStrategy checks a strategy of this package (LimitRetry's inner one
// too); a caller's own strategy is its own to check.
func validStrategy(s RetryStrategy) error {
	if v, ok := s.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

// LimitRetry allows at most attempts retries of s after the first attempt
// (0: the first attempt only). The count starts afresh at every Acquire.
func LimitRetry(s RetryStrategy, attempts int) RetryStrategy {
	return limitRetry{s, attempts}
}

// patience counts a waiter's waits against its strategy: each wait asks it
// once, k = 1, 2, 3…, and lasts its backoff whatever wakes the waiter in
// between (a release announced, the holder's lease ending, a refresh).
type patience struct {
	strategy RetryStrategy
	first    time.Duration // NextBackoff(1), asked once up front
	firstOK  bool
	waits    int       // waits begun
	end      time.Time // when the current wait ends
	spent    bool      // the strategy said no: no more waits
	observed *hold     // the lock acquired: its first wait is observed (hold.observeWait)
}

// mayWait asks for the first wait up front (kept), to decide how to wait at all.
func (p *patience) mayWait() bool {
	p.first, p.firstOK = p.strategy.NextBackoff(1)
	p.spent = !p.firstOK
	return p.firstOK
}

// begin starts the next wait, or returns false when the strategy allows no more.
func (p *patience) begin(now time.Time) bool {
	if p.spent {
		return false
	}
	d, ok := p.first, p.firstOK
	if p.waits > 0 {
		d, ok = p.strategy.NextBackoff(p.waits + 1)
	}
	if !ok {
		p.spent = true
		return false
	}
	if p.waits == 0 && p.observed != nil {
		p.observed.observeWait(true)
	}
	p.waits++
	p.end = now.Add(max(d, time.Millisecond))
	return true
}

func (p *patience) waiting(now time.Time) bool { return p.waits > 0 && now.Before(p.end) }

// retryPause is how long a waiter lets Redis be after its n-th failed attempt
// in a row (see acquisition.failed), never past its strategy's wait: jittered
// from 25-50 ms, doubling up to 125-250 ms, quick through a blip and a
// failover, four to eight attempts a second against a Redis that is down.
// The ceiling was 500 ms: a waiter then got in about a second after a
// Cluster's promotion (its next try came up to 500 ms after the new slot
// map, and a try sent by the old map waited as long again), where the
// issue asks for a second at most; a refused dial costs Redis nothing.
func retryPause(n int) time.Duration {
	ceiling := min(50*time.Millisecond<<(min(n, 4)-1), 250*time.Millisecond)
	return ceiling/2 + rand.N(ceiling/2+1)
}
