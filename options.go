package redislock

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/redislock/redislock/internal/lockrules"
)

// Defaults. Every option documents its default here and in docs/configuration.md.
const (
	// DefaultTTL is the lease a lock gets on the server when WithTTL is not given.
	DefaultTTL = 30 * time.Second
	// DefaultKeyPrefix is prepended to every lock key.
	DefaultKeyPrefix = "lock:"
	// MaxWaitWithoutDeadline bounds the waiting of a retrying Acquire or
	// RunWithLock whose context has no deadline: waiting never lasts forever.
	MaxWaitWithoutDeadline = time.Minute
	// ReleaseTimeout bounds the release that RunWithLock sends after fn
	// returns, on a context detached from the caller's cancellation.
	ReleaseTimeout = 5 * time.Second
	// MinTTL is the shortest lease WithTTL and Lock.Extend accept: below it the
	// round trip and the drift allowance eat the lease, past its safe deadline.
	MinTTL = lockrules.MinTTL
	// MaxTTL is the longest lease WithTTL and Lock.Extend accept (24h): a
	// lease without the watchdog may span a day-long job; a longer one is a
	// unit mistake (WithTTL(math.MaxInt64) would be 292 years).
	MaxTTL = lockrules.MaxTTL
	// minExtendInterval is the shortest watchdog interval.
	minExtendInterval = time.Millisecond
)

// An Option configures a Client (given to New: its defaults) or one call (it
// overrides them). Options are values: the same Option may be reused.
type Option interface{ apply(*options) }

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// checked returns an Option that applies apply, or, when bad is not nil,
// applies nothing and has every call that uses it report bad: a bad value
// is found when the Option is made, reported where it is used.
func checked(bad error, apply func(*options)) Option {
	return optionFunc(func(o *options) {
		if bad != nil {
			o.invalid(bad)
			return
		}
		apply(o)
	})
}

// invalidIf is invalidf's error when bad holds, else nil.
func invalidIf(bad bool, format string, args ...any) error {
	if !bad {
		return nil
	}
	return invalidf(format, args...)
}

// options is every setting, with all defaults in defaultOptions.
type options struct {
	ttl            time.Duration
	retry          RetryStrategy
	fencing        bool
	prefix         string
	watchdog       bool
	extendInterval time.Duration // 0: ttl/3
	logger         *slog.Logger  // nil: slog.Default() at use, so SetDefault after New still counts
	observer       Observer
	gauges         GaugeObserver // observer, when it is one (asserted once, by WithObserver)
	failOpen       bool
	maxHold        time.Duration // 0: no limit
	replicas       int           // WithReplicaAck; 0: no WAIT
	replicaTimeout time.Duration
	metadata       string // WithMetadata; "" for none
	err            error  // bad option values, reported by every call
	ttlArg         any    // ttl in milliseconds, boxed once (see lockRef); set by Client.resolve
	handoverArg    any    // a release's last argument (see handoverArg); set with ttlArg
	campaign       bool   // Elect's acquisitions: no MaxWaitWithoutDeadline cap
}

func defaultOptions() options {
	return options{
		ttl:      DefaultTTL,
		retry:    NoRetry(),
		prefix:   DefaultKeyPrefix,
		watchdog: true,
	}
}

func (o *options) invalid(err error) { o.err = join(o.err, err) }

// validate returns the first of: the bad option values, an extend interval
// not below the TTL, a bad retry strategy (each check is pure).
func (o *options) validate() error {
	return cmp.Or(o.err,
		invalidIf(o.extendInterval >= o.ttl, "extend interval %v must be shorter than the TTL %v", o.extendInterval, o.ttl),
		validStrategy(o.retry))
}

// interval is the watchdog's interval for a lease of ttl: the extend
// interval when one is set below ttl (validate makes it so for the TTL;
// Extend's ttl may be shorter), else ttl/3.
func (o *options) interval(ttl time.Duration) time.Duration {
	if o.extendInterval > 0 && o.extendInterval < ttl {
		return o.extendInterval
	}
	return ttl / 3
}

// log is the logger set, else slog.Default() now (see options.logger).
func (o *options) log() *slog.Logger { return cmp.Or(o.logger, slog.Default()) }

// WithTTL sets the lease the lock gets on the server: how long it survives a
// crashed holder. Default DefaultTTL (30s); from MinTTL (10ms) to MaxTTL
// (24h); it is rounded down to whole milliseconds, the unit Redis keeps.
func WithTTL(d time.Duration) Option {
	bad := lockrules.TTLOutOfRange(d)
	return checked(invalidIf(bad != "", "TTL %v %s", d, bad), func(o *options) { o.ttl = d.Truncate(time.Millisecond) })
}

// WithRetry sets what Acquire and RunWithLock do when the lock is held by
// someone else. Default NoRetry(): one attempt, then ErrNotAcquired.
func WithRetry(s RetryStrategy) Option {
	return checked(invalidIf(s == nil, "nil RetryStrategy (use NoRetry())"), func(o *options) { o.retry = s })
}

// WithFencing takes a fencing token with the lock, in the same round trip:
// a number from a per-lock counter (INCR) that grows with every
// acquisition. Read it with Lock.Fence or FenceFromContext. Default off.
func WithFencing() Option {
	return optionFunc(func(o *options) { o.fencing = true })
}

// WithKeyPrefix sets the prefix of every key: the lock key is prefix + "{" +
// name + "}". Default DefaultKeyPrefix ("lock:"); "" is allowed.
func WithKeyPrefix(p string) Option {
	return optionFunc(func(o *options) { o.prefix = p })
}

// WithWatchdog turns automatic extension on or off. Default on. Off, the
// lease ends after the TTL unless Lock.Extend is called, and the lock's
// context is cancelled (reason Expired) at the lease's safe deadline.
func WithWatchdog(enabled bool) Option {
	return optionFunc(func(o *options) { o.watchdog = enabled })
}

// WithExtendInterval sets how often the watchdog extends the lock. Default
// (and zero) TTL/3; otherwise at least 1ms and shorter than the TTL.
func WithExtendInterval(d time.Duration) Option {
	bad := invalidIf(d < 0 || (d > 0 && d < minExtendInterval), "extend interval %v is below the %v minimum (0 means TTL/3)", d, minExtendInterval)
	return checked(bad, func(o *options) { o.extendInterval = d })
}

// WithLogger sets where the lock logs: acquisition and release at Debug (the
// only level with tokens), a retried extension and a fail-open run at Warn,
// a lost lock at Error. Default slog.Default() at the time of logging; nil
// is an error (to silence it, pass slog.New(slog.DiscardHandler)).
func WithLogger(l *slog.Logger) Option {
	return checked(invalidIf(l == nil, "nil logger (use slog.New(slog.DiscardHandler) to silence)"), func(o *options) { o.logger = l })
}

// WithObserver sets the metrics hooks. Default none (nil costs nothing).
// An Observer that is also a GaugeObserver gets its events too.
func WithObserver(obs Observer) Option {
	return optionFunc(func(o *options) {
		o.observer = obs
		o.gauges, _ = obs.(GaugeObserver)
	})
}

// WithFailOpen makes RunWithLock run fn without a lock when Redis cannot be
// reached (connection refused, timeouts, a server still loading), never
// when the lock is held by someone else; the run is logged at Warn and
// observed, without a fence. Default off (fail closed). Acquire rejects it
// as a per-call option and ignores it as a client default.
func WithFailOpen() Option {
	return optionFunc(func(o *options) { o.failOpen = true })
}

// WithMaxHold caps one hold: after d the watchdog stops and the context is
// cancelled (MaxHoldReached); the key expires (or is released), giving the
// work its TTL to stop. Default (and zero) no limit.
func WithMaxHold(d time.Duration) Option {
	return checked(invalidIf(d < 0, "negative max hold %v", d), func(o *options) { o.maxHold = d })
}

// WithReplicaAck makes the acquisition and each extension wait (Redis' WAIT,
// same round trip) until replicas replicas acknowledged it or timeout
// passed. An acquisition not acknowledged is given back and fails with
// ErrReplicaAck, which a waiting caller rides through as it does a Redis
// error (a replica catching up after a failover), each attempt under a new
// token: with fewer replicas than asked for for good, it tries until its ctx
// or strategy ends. An extension not acknowledged does not move the safe
// deadline and is retried. Default off. It narrows the failover window but
// does not close it: WAIT makes nothing durable, nor picks the replica
// promoted. It needs replicas >= 1, timeout > 0 and one primary (not a
// ClusterClient: WAIT must travel on the connection that wrote).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	bad := invalidIf(replicas < 1 || timeout <= 0, "WithReplicaAck(%d, %v) needs replicas >= 1 and timeout > 0", replicas, timeout)
	return checked(bad, func(o *options) { o.replicas, o.replicaTimeout = replicas, timeout })
}
