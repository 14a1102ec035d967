// Package redislockotel records the events of redislock locks as
// OpenTelemetry metrics: acquisitions by result, losses by reason,
// fail-open runs, extension failures and releases as counters; wait,
// campaign, hold and extension times as histograms; what is held, waited
// for and led now as up-down counters.
//
// Create one [Observer] with [New] on your MeterProvider and pass it to
// every client with redislock.WithObserver:
//
//	obs, err := redislockotel.New(otel.GetMeterProvider())
//	if err != nil { ... }
//	locker := redislock.New(rdb, redislock.WithObserver(obs))
//
// The instruments, on the meter named by [ScopeName]:
//
//	redislock.acquisitions       counter {acquisition}  redislock.acquire.result: acquired, not_acquired, redis_error
//	redislock.acquire.attempts   counter {attempt}      acquire commands sent, retries included
//	redislock.acquire.wait_time  histogram s            redislock.acquire.result (not Elect's campaigns)
//	redislock.campaign.duration  histogram s            an Elect campaign, until it led or gave up
//	redislock.hold.duration      histogram s            from acquisition to the release (also after a loss)
//	redislock.extend.duration    histogram s            round trip of every extension command
//	redislock.extend.failures    counter {failure}      redislock.extend.failure_reason: not_held, redis_error, paused
//	redislock.losses             counter {loss}         redislock.lost.reason: expired, taken, unreachable, max_hold
//	redislock.releases           counter {release}      redislock.release.result: released, not_held, redis_error
//	redislock.fail_open.runs     counter {run}          RunWithLock runs without a lock (WithFailOpen)
//	redislock.held               updowncounter {hold}   redislock.lock.kind: lock, shared, semaphore
//	redislock.waiting            updowncounter {caller} redislock.lock.kind (not Elect's followers)
//	redislock.leader             updowncounter {leader} redislock.lock.name: 1 while a Client served leads it
//
// The lock name is not an attribute unless [WithNameAttribute] is given:
// see there. redislock.leader always carries it: elections are few.
//
// held, waiting and leader are UpDownCounters, not observable gauges: they
// are counts that events move, and they add up (over the Clients of one
// Observer, over Observers sharing a provider, over processes: summed over
// a fleet, redislock.leader is the number of leaders), as OpenTelemetry's
// semantic conventions count active requests or pooled connections. A
// gauge would need state and a callback the Observer could not unregister,
// and two Observers on one provider would report the same series twice.
package redislockotel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redislock/redislock"
)

// ScopeName is the instrumentation scope (meter name) of the instruments:
// the package's import path, as OpenTelemetry recommends.
const ScopeName = "github.com/redislock/redislock/redislockotel"

// Attribute keys. They are part of the metrics' contract: alerts and
// dashboards match them.
const (
	// NameKey is the lock name, present only with WithNameAttribute (and
	// always on redislock.leader: the election's name).
	NameKey = attribute.Key("redislock.lock.name")
	// KindKey is the kind of lock of redislock.held and redislock.waiting:
	// lock (Acquire, Elect, a multi lock), shared or semaphore
	// (redislock.Info.Kind's values).
	KindKey = attribute.Key("redislock.lock.kind")
	// AcquireResultKey is acquired, not_acquired or redis_error.
	AcquireResultKey = attribute.Key("redislock.acquire.result")
	// ExtendFailureReasonKey is not_held, redis_error, or paused: the
	// extension came after the safe deadline because this process did not
	// run (redislock.ExtendEvent.Paused), no failure of Redis.
	ExtendFailureReasonKey = attribute.Key("redislock.extend.failure_reason")
	// LostReasonKey is expired, taken, unreachable or max_hold (other for a
	// reason this version does not know).
	LostReasonKey = attribute.Key("redislock.lost.reason")
	// ReleaseResultKey is released, not_held or redis_error.
	ReleaseResultKey = attribute.Key("redislock.release.result")
)

const (
	resultAcquired    = "acquired"
	resultNotAcquired = "not_acquired"
	resultRedisError  = "redis_error"
	resultReleased    = "released"
	resultNotHeld     = "not_held"
	reasonPaused      = "paused"
)

var lostReasons = map[redislock.LostReason]string{
	redislock.Expired:        "expired",
	redislock.Taken:          "taken",
	redislock.Unreachable:    "unreachable",
	redislock.MaxHoldReached: "max_hold",
}

// Bucket boundaries, in seconds, given to the SDK as advice: a View
// (sdk/metric WithView) can still replace them.
//
// Wait: an Acquire that does not wait is one Redis round trip, well under a
// millisecond on a local network; one that waits without a deadline gives up
// after a minute (redislock.MaxWaitWithoutDeadline). Hold: from one quick
// write to an hour-long batch. Extend: one round trip, sub-millisecond when
// healthy; the upper buckets show a struggling server before locks are lost.
var (
	waitBoundaries   = []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	holdBoundaries   = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
	extendBoundaries = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	// Campaign: a round trip when nobody leads, a TTL when the leader died,
	// as long as the leader leads for a follower: hours, days.
	campaignBoundaries = []float64{.001, .01, .1, 1, 10, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}
)

// kinds are KindKey's values: redislock.Info.Kind's.
var kinds = []string{"lock", "shared", "semaphore"}

// An Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	nameAttribute bool
}

// WithNameAttribute adds the lock name, as redislock.lock.name, to every
// measurement. Default off, and off no attribute carries the name.
//
// Turn it on only when the lock names are few and fixed ("settlement",
// "token-refresh"). Names built from data ("order:"+id, one per day) make
// a new time series per name and instrument, which the SDK keeps in
// memory (cumulative temporality keeps them for the life of the process)
// and which the metrics backend bills and indexes.
func WithNameAttribute() Option {
	return optionFunc(func(c *config) { c.nameAttribute = true })
}

// Observer is a redislock.Observer that records into OpenTelemetry
// instruments. It is safe for concurrent use, and one Observer can serve any
// number of clients. It must not be copied; the zero value records nothing
// (use New).
type Observer struct {
	nameAttribute bool
	m             *instruments
	// Without the name attribute, the options of every attribute set,
	// built once at New, by the one attribute in the set (the zero
	// KeyValue for the empty set); read-only after New.
	fixed map[attribute.KeyValue]metric.MeasurementOption

	// leading counts, by election name, the terms the Clients served hold:
	// two at once when a loss is not noticed yet (redislock.leader stays 1).
	mu      sync.Mutex
	leading map[string]int
}

type instruments struct {
	acquisitions   metric.Int64Counter
	attempts       metric.Int64Counter
	wait           metric.Float64Histogram
	hold           metric.Float64Histogram
	extend         metric.Float64Histogram
	extendFailures metric.Int64Counter
	losses         metric.Int64Counter
	releases       metric.Int64Counter
	failOpen       metric.Int64Counter
	campaign       metric.Float64Histogram
	held           metric.Int64UpDownCounter
	waiting        metric.Int64UpDownCounter
	leader         metric.Int64UpDownCounter
}

var _ redislock.GaugeObserver = (*Observer)(nil)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: redislockotel: "+format, append([]any{redislock.ErrInvalidArgument}, args...)...)
}

// New creates the instruments on a meter of provider named ScopeName. The
// provider must not be nil: pass otel.GetMeterProvider() for the global
// one, or noop.NewMeterProvider() to record nothing.
//
// It returns an error wrapping redislock.ErrInvalidArgument for a nil
// provider or a nil Option, or the provider's error if it refuses to create
// an instrument. Creating a second Observer on the same provider is allowed:
// both record into the same instruments.
func New(provider metric.MeterProvider, opts ...Option) (*Observer, error) {
	if isNil(provider) {
		return nil, invalidf("nil MeterProvider (pass otel.GetMeterProvider() for the global one)")
	}
	var c config
	for _, opt := range opts {
		if opt == nil {
			return nil, invalidf("nil Option")
		}
		opt.apply(&c)
	}
	meter := provider.Meter(ScopeName)
	if isNil(meter) {
		return nil, fmt.Errorf("redislockotel: the MeterProvider returned a nil Meter")
	}

	var errs []error
	counter := func(name, unit, description string) metric.Int64Counter {
		inst, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
		errs = append(errs, err)
		return inst
	}
	histogram := func(name, description string, boundaries []float64) metric.Float64Histogram {
		inst, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(description),
			metric.WithExplicitBucketBoundaries(boundaries...))
		errs = append(errs, err)
		return inst
	}
	upDown := func(name, unit, description string) metric.Int64UpDownCounter {
		inst, err := meter.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(description))
		errs = append(errs, err)
		return inst
	}
	m := &instruments{
		acquisitions: counter("redislock.acquisitions", "{acquisition}",
			"Acquire calls, by result: acquired, not_acquired (another holder had the lock), redis_error (Redis could not be reached or refused)."),
		attempts: counter("redislock.acquire.attempts", "{attempt}", "Acquire commands sent to Redis, retries included."),
		wait: histogram("redislock.acquire.wait_time",
			"Time from an Acquire call to its end, by result; Elect's campaigns are not in it.", waitBoundaries),
		campaign: histogram("redislock.campaign.duration",
			"Time an Elect campaign lasted, from its start until it led or gave up.", campaignBoundaries),
		held: upDown("redislock.held", "{hold}", "Locks held now, by kind (lock: Acquire, Elect, a multi lock; shared; semaphore: a slot)."),
		waiting: upDown("redislock.waiting", "{caller}",
			"Callers waiting for a lock now, by kind; Elect's followers are not counted."),
		leader: upDown("redislock.leader", "{leader}",
			"1 while a Client of this Observer leads the election named redislock.lock.name, 0 after it stopped leading."),
		hold: histogram("redislock.hold.duration",
			"Time locks were held, from acquisition to the release that ended the hold (also after a loss).", holdBoundaries),
		extend: histogram("redislock.extend.duration",
			"Round trip of extension commands (watchdog and Lock.Extend), successful or not.", extendBoundaries),
		extendFailures: counter("redislock.extend.failures", "{failure}", "Extensions that failed, by reason: not_held, redis_error, paused (this process did not run in time)."),
		losses:         counter("redislock.losses", "{loss}", "Held locks that were lost, by reason: expired, taken, unreachable, max_hold."),
		releases:       counter("redislock.releases", "{release}", "Releases that reached Redis, by result: released, not_held, redis_error."),
		failOpen: counter("redislock.fail_open.runs", "{run}",
			"RunWithLock calls that ran without the lock because Redis could not be reached (WithFailOpen)."),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redislockotel: creating instruments: %w", err)
	}
	o := &Observer{nameAttribute: c.nameAttribute, m: m, leading: map[string]int{}}
	if !c.nameAttribute {
		fixed := []attribute.KeyValue{{}}
		for _, result := range []string{resultAcquired, resultNotAcquired, resultRedisError} {
			fixed = append(fixed, AcquireResultKey.String(result))
		}
		for _, reason := range []string{resultNotHeld, resultRedisError, reasonPaused} {
			fixed = append(fixed, ExtendFailureReasonKey.String(reason))
		}
		for _, reason := range lostReasons {
			fixed = append(fixed, LostReasonKey.String(reason))
		}
		for _, result := range []string{resultReleased, resultNotHeld, resultRedisError} {
			fixed = append(fixed, ReleaseResultKey.String(result))
		}
		for _, kind := range kinds {
			fixed = append(fixed, KindKey.String(kind))
		}
		o.fixed = make(map[attribute.KeyValue]metric.MeasurementOption, len(fixed))
		for _, kv := range fixed {
			if kv.Key == "" {
				o.fixed[kv] = metric.WithAttributeSet(*attribute.EmptySet())
				continue
			}
			o.fixed[kv] = metric.WithAttributeSet(attribute.NewSet(kv))
		}
	}
	return o, nil
}

// isNil reports whether v is nil or a nil pointer in an interface, which
// would otherwise panic on first use.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// attrs returns the measurement option for one event: the lock name when
// the name attribute is on, and extra.
func (o *Observer) attrs(name string, extra ...attribute.KeyValue) metric.MeasurementOption {
	if !o.nameAttribute {
		var key attribute.KeyValue
		if len(extra) == 1 {
			key = extra[0]
		}
		if opt, ok := o.fixed[key]; ok && len(extra) <= 1 {
			return opt
		}
		return metric.WithAttributeSet(attribute.NewSet(extra...))
	}
	return metric.WithAttributeSet(attribute.NewSet(append(extra, NameKey.String(name))...))
}

// ObserveAcquire counts the Acquire by result (acquired, not acquired, Redis
// error), adds its attempts, and records its wait time, or an Elect
// campaign's time (redislock.campaign.duration).
func (o *Observer) ObserveAcquire(e redislock.AcquireEvent) {
	if o == nil || o.m == nil {
		return
	}
	result := resultRedisError
	switch {
	case e.Acquired:
		result = resultAcquired
	case errors.Is(e.Err, redislock.ErrNotAcquired):
		result = resultNotAcquired
	}
	ctx := contextForMeasurement()
	withResult := o.attrs(e.Name, AcquireResultKey.String(result))
	o.m.acquisitions.Add(ctx, 1, withResult)
	if e.Attempts > 0 {
		o.m.attempts.Add(ctx, int64(e.Attempts), o.attrs(e.Name))
	}
	if e.Campaign {
		o.m.campaign.Record(ctx, e.Wait.Seconds(), o.attrs(e.Name))
		return
	}
	o.m.wait.Record(ctx, e.Wait.Seconds(), withResult)
}

// ObserveHold counts the hold in redislock.held while it lasts.
func (o *Observer) ObserveHold(e redislock.HoldEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.m.held.Add(contextForMeasurement(), delta(e.Began), o.attrs(e.Name, KindKey.String(e.Kind)))
}

// ObserveWait counts the caller in redislock.waiting while it waits, but for
// an Elect follower, which makes its election's redislock.leader point (at
// 0) instead: a follower waits as long as the leader leads.
func (o *Observer) ObserveWait(e redislock.WaitEvent) {
	if o == nil || o.m == nil {
		return
	}
	if e.Campaign {
		o.m.leader.Add(contextForMeasurement(), 0, metric.WithAttributes(NameKey.String(e.Name)))
		return
	}
	o.m.waiting.Add(contextForMeasurement(), delta(e.Began), o.attrs(e.Name, KindKey.String(e.Kind)))
}

// ObserveLeader adds 1 to redislock.leader as the first term of a Client
// served begins, and takes it back as the last one ends.
func (o *Observer) ObserveLeader(e redislock.LeaderEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	before := o.leading[e.Name]
	o.leading[e.Name] += int(delta(e.Leading))
	if leads := o.leading[e.Name] > 0; leads != (before > 0) {
		o.m.leader.Add(contextForMeasurement(), delta(leads), metric.WithAttributes(NameKey.String(e.Name)))
	}
}

// delta is an up-down counter's change: +1 as a hold, wait or term begins,
// -1 as it ends.
func delta(began bool) int64 {
	if began {
		return 1
	}
	return -1
}

// ObserveExtend records the extension's round trip and counts it as a
// failure when it failed.
func (o *Observer) ObserveExtend(e redislock.ExtendEvent) {
	if o == nil || o.m == nil {
		return
	}
	ctx := contextForMeasurement()
	o.m.extend.Record(ctx, e.Latency.Seconds(), o.attrs(e.Name))
	if e.Err != nil {
		reason := resultRedisError
		switch {
		case errors.Is(e.Err, redislock.ErrNotHeld):
			reason = resultNotHeld
		case e.Paused > 0:
			reason = reasonPaused
		}
		o.m.extendFailures.Add(ctx, 1, o.attrs(e.Name, ExtendFailureReasonKey.String(reason)))
	}
}

// ObserveLost counts the loss by reason.
func (o *Observer) ObserveLost(e redislock.LostEvent) {
	if o == nil || o.m == nil {
		return
	}
	reason, ok := lostReasons[e.Reason]
	if !ok {
		reason = "other"
	}
	o.m.losses.Add(contextForMeasurement(), 1, o.attrs(e.Name, LostReasonKey.String(reason)))
}

// ObserveRelease counts the release by result and records the hold time
// when Redis answered (our key deleted, or no longer ours).
//
// The hold time is recorded here and only here, so that every hold counts
// once: a lock that was lost is still released by its holder (RunWithLock
// always releases), and a lock lost by MaxHoldReached is usually released
// with success, so recording losses too would count those holds twice. A
// release that failed on Redis records nothing; the holder's next Release
// will.
func (o *Observer) ObserveRelease(e redislock.ReleaseEvent) {
	if o == nil || o.m == nil {
		return
	}
	result := resultRedisError
	switch {
	case e.Err == nil:
		result = resultReleased
	case errors.Is(e.Err, redislock.ErrNotHeld):
		result = resultNotHeld
	}
	ctx := contextForMeasurement()
	o.m.releases.Add(ctx, 1, o.attrs(e.Name, ReleaseResultKey.String(result)))
	if result != resultRedisError {
		o.m.hold.Record(ctx, e.HeldFor.Seconds(), o.attrs(e.Name))
	}
}

// ObserveFailOpen counts a RunWithLock that ran without the lock.
func (o *Observer) ObserveFailOpen(e redislock.FailOpenEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.m.failOpen.Add(contextForMeasurement(), 1, o.attrs(e.Name))
}

// contextForMeasurement is the context of every measurement. The events
// carry no context of the caller, so measurements get no exemplar from a
// span; the background context is all there is.
func contextForMeasurement() context.Context { return context.Background() }
