// Package redislockprom exports the events of redislock locks as Prometheus
// metrics: acquisitions by outcome, losses by reason, fail-open runs,
// extension failures and releases as counters; wait, campaign, hold and
// extension times as histograms; what is held, waited for and led now as
// gauges.
//
// Create one [Observer] per registry with [New] and pass it to every client
// with redislock.WithObserver:
//
//	obs, err := redislockprom.New(prometheus.DefaultRegisterer)
//	if err != nil { ... }
//	locker := redislock.New(rdb, redislock.WithObserver(obs))
//
// The metrics, all under the namespace set with [WithNamespace] (none by
// default):
//
//	redislock_acquired_total             Acquire calls that took the lock
//	redislock_not_acquired_total         Acquire calls that found it held by someone else
//	redislock_acquire_errors_total       Acquire calls that failed on Redis (unreachable, refused)
//	redislock_acquire_attempts_total     acquire commands sent (retries included)
//	redislock_wait_seconds{result}       time from the Acquire call to its end (not Elect's campaigns)
//	redislock_campaign_seconds           time an Elect campaign lasted, until it led or gave up
//	redislock_hold_seconds               time from acquisition to release (also after a loss)
//	redislock_extend_duration_seconds    round trip of every extension command
//	redislock_extend_failures_total{reason}  extensions that failed: not_held, redis_error, paused
//	redislock_lost_total{reason}         held locks lost: expired, taken, unreachable, max_hold
//	redislock_releases_total{result}     releases that reached Redis: released, not_held, redis_error
//	redislock_fail_open_total            RunWithLock runs without a lock (WithFailOpen)
//	redislock_held{kind}                 holds now: lock (Acquire, Elect, a multi lock), shared, semaphore
//	redislock_waiting{kind}              callers waiting for a lock now (not Elect's followers)
//	redislock_leader{name}               1 while a Client served leads the election called name, else 0
//
// The lock name is not a label unless [WithNameLabel] is given: see there.
// The election's name always is: elections are few, and "which pod leads"
// is the question the gauge answers.
package redislockprom

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redislock/redislock"
)

// Label values. They are part of the metrics' contract: alerts match them.
const (
	resultAcquired    = "acquired"
	resultNotAcquired = "not_acquired"
	resultRedisError  = "redis_error"
	resultReleased    = "released"
	resultNotHeld     = "not_held"
	// reasonPaused: an extension too late because this process did not run
	// (redislock.ExtendEvent.Paused), no failure of Redis.
	reasonPaused = "paused"
)

// lostReasons maps every LostReason to its label value; a reason added to
// the core later is counted as "other" until it is listed here.
var lostReasons = map[redislock.LostReason]string{
	redislock.Expired:        "expired",
	redislock.Taken:          "taken",
	redislock.Unreachable:    "unreachable",
	redislock.MaxHoldReached: "max_hold",
}

// Default histogram buckets, in seconds. See the Option docs for why.
var (
	defaultWaitBuckets   = []float64{.0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	defaultHoldBuckets   = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
	defaultExtendBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}
	// A campaign takes a round trip when nobody leads, a hand-over's wait
	// after a release, a TTL after a leader died, and as long as the leader
	// leads for a follower: hours, days.
	defaultCampaignBuckets = []float64{.001, .01, .1, 1, 10, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}
)

// kinds are the values of the kind label: redislock.Info.Kind's.
var kinds = []string{"lock", "shared", "semaphore"}

// An Option configures New.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	namespace     string
	constLabels   prometheus.Labels
	nameLabel     bool
	waitBuckets   []float64
	holdBuckets   []float64
	extendBuckets []float64
	campaignBkts  []float64
	err           error
}

func (c *config) invalid(format string, args ...any) {
	c.err = errors.Join(c.err, invalidf(format, args...))
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: redislockprom: "+format, append([]any{redislock.ErrInvalidArgument}, args...)...)
}

// legacyName is the classic Prometheus name syntax. Namespaces and label
// names are held to it (client_golang would accept any UTF-8) so that the
// metrics can be queried in PromQL without quoting.
var legacyName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// WithNamespace puts ns and an underscore before every metric name:
// WithNamespace("billing") gives billing_redislock_acquired_total. Default
// none. ns must match [a-zA-Z_][a-zA-Z0-9_]*.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *config) {
		if !legacyName.MatchString(ns) {
			c.invalid("namespace %q must match [a-zA-Z_][a-zA-Z0-9_]*", ns)
			return
		}
		c.namespace = ns
	})
}

// WithConstLabels adds labels with fixed values to every metric, to tell
// apart observers on one registry (one per Redis deployment, say). Default
// none. Label names must match [a-zA-Z_][a-zA-Z0-9_]*, must not start with
// "__", and must not be one of the labels this package sets (name, reason,
// result, kind, le).
func WithConstLabels(labels prometheus.Labels) Option {
	return optionFunc(func(c *config) {
		for name := range labels {
			switch {
			case !legacyName.MatchString(name) || strings.HasPrefix(name, "__"):
				c.invalid("const label name %q must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __", name)
			case name == "name" || name == "reason" || name == "result" || name == "kind" || name == "le":
				c.invalid("const label name %q is set by redislockprom itself", name)
			}
		}
		merged := make(prometheus.Labels, len(c.constLabels)+len(labels))
		for k, v := range c.constLabels {
			merged[k] = v
		}
		for k, v := range labels {
			merged[k] = v
		}
		c.constLabels = merged
	})
}

// WithNameLabel adds the lock name as a label called "name" to every metric.
// Default off, and off no label carries the name.
//
// Turn it on only when the lock names are few and fixed ("settlement",
// "token-refresh"). Names built from data ("order:"+id, one per day) create
// a new set of series per name (over a hundred, counting histogram
// buckets) that the registry keeps for the life of the process: memory
// grows without bound and the Prometheus server pays for every series.
func WithNameLabel() Option {
	return optionFunc(func(c *config) { c.nameLabel = true })
}

// WithWaitBuckets sets the buckets, in seconds, of redislock_wait_seconds.
// Default 100µs, 500µs, 1ms, 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, 250ms,
// 500ms, 1s, 2.5s, 5s, 10s, 30s, 60s: an Acquire that does not wait is one
// Redis round trip (well under a millisecond on a local network), and one
// that waits without a deadline gives up after a minute
// (redislock.MaxWaitWithoutDeadline). Buckets must be finite and strictly
// increasing.
func WithWaitBuckets(buckets ...float64) Option {
	return bucketsOption("wait", buckets, func(c *config) *[]float64 { return &c.waitBuckets })
}

// WithHoldBuckets sets the buckets, in seconds, of redislock_hold_seconds.
// Default 1ms, 5ms, 10ms, 50ms, 100ms, 500ms, 1s, 5s, 10s, 30s, 1min, 5min,
// 10min, 30min, 1h: critical sections range from one quick write to a batch
// job. Buckets must be finite and strictly increasing.
func WithHoldBuckets(buckets ...float64) Option {
	return bucketsOption("hold", buckets, func(c *config) *[]float64 { return &c.holdBuckets })
}

// WithExtendBuckets sets the buckets, in seconds, of
// redislock_extend_duration_seconds. Default 100µs, 250µs, 500µs, 1ms,
// 2.5ms, 5ms, 10ms, 25ms, 50ms, 100ms, 250ms, 500ms, 1s, 2.5s, 5s: an
// extension is one Redis round trip, sub-millisecond when healthy, and the
// upper buckets show a struggling server or network before the locks are
// lost. Buckets must be finite and strictly increasing.
func WithExtendBuckets(buckets ...float64) Option {
	return bucketsOption("extend", buckets, func(c *config) *[]float64 { return &c.extendBuckets })
}

// WithCampaignBuckets sets the buckets, in seconds, of
// redislock_campaign_seconds. Default 1ms, 10ms, 100ms, 1s, 10s, 30s, 1min,
// 5min, 30min, 1h, 6h, 1d, 1w: a campaign lasts a round trip when nobody
// leads, a TTL when the leader died, and as long as the leader leads for a
// follower. Buckets must be finite and strictly increasing.
func WithCampaignBuckets(buckets ...float64) Option {
	return bucketsOption("campaign", buckets, func(c *config) *[]float64 { return &c.campaignBkts })
}

func bucketsOption(what string, buckets []float64, field func(*config) *[]float64) Option {
	buckets = append([]float64(nil), buckets...) // the caller may reuse its slice
	return optionFunc(func(c *config) {
		if err := checkBuckets(buckets); err != nil {
			c.invalid("%s buckets %v: %v", what, buckets, err)
			return
		}
		*field(c) = buckets
	})
}

func checkBuckets(buckets []float64) error {
	if len(buckets) == 0 {
		return errors.New("no buckets")
	}
	for i, b := range buckets {
		if math.IsNaN(b) || math.IsInf(b, 0) {
			return errors.New("buckets must be finite")
		}
		if i > 0 && b <= buckets[i-1] {
			return errors.New("buckets must be strictly increasing")
		}
	}
	return nil
}

// Observer is a redislock.Observer that records into Prometheus metrics. It
// is also the prometheus.Collector of those metrics, which New registers.
// It is safe for concurrent use, and one Observer can serve any number of
// clients. It must not be copied; the zero value records nothing (use New).
type Observer struct {
	nameLabel bool
	m         *metrics
	// Without the name label, the series resolved at New, by vector and
	// label value (read-only after New).
	counters  map[seriesKey]prometheus.Counter
	observers map[seriesKey]prometheus.Observer
	gauges    map[seriesKey]prometheus.Gauge

	// leading counts, by election name, the terms the Clients served hold:
	// two at once when a loss is not noticed yet (the gauge still says 1).
	mu      sync.Mutex
	leading map[string]int
}

type seriesKey struct {
	vec   prometheus.Collector
	value string // the label value besides the name; "" for none
}

type metrics struct {
	acquired       *prometheus.CounterVec
	notAcquired    *prometheus.CounterVec
	acquireErrors  *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	wait           *prometheus.HistogramVec
	hold           *prometheus.HistogramVec
	extend         *prometheus.HistogramVec
	extendFailures *prometheus.CounterVec
	lost           *prometheus.CounterVec
	releases       *prometheus.CounterVec
	failOpen       *prometheus.CounterVec
	campaign       *prometheus.HistogramVec
	held           *prometheus.GaugeVec
	waiting        *prometheus.GaugeVec
	leader         *prometheus.GaugeVec
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.acquired, m.notAcquired, m.acquireErrors, m.attempts, m.wait, m.hold,
		m.extend, m.extendFailures, m.lost, m.releases, m.failOpen, m.campaign, m.held, m.waiting, m.leader,
	}
}

var _ redislock.GaugeObserver = (*Observer)(nil)
var _ prometheus.Collector = (*Observer)(nil)

// New creates the metrics and registers them on reg, all at once: on error
// nothing is registered. reg must not be nil; pass
// prometheus.DefaultRegisterer to use the global registry.
//
// It returns an error wrapping redislock.ErrInvalidArgument for a nil reg or
// a bad option. When reg already holds the same metrics (an Observer with
// the same namespace and const labels), the error wraps a
// prometheus.AlreadyRegisteredError whose ExistingCollector is the earlier
// *Observer, which can be used instead. Other registration errors are
// wrapped too: a metric of the same name registered by other code, or an
// Observer on the same registry and namespace with other const label
// names (Prometheus wants one set of label names per metric name, so
// observers on one registry differ by namespace or by const label values).
func New(reg prometheus.Registerer, opts ...Option) (*Observer, error) {
	if isNil(reg) {
		return nil, invalidf("nil Registerer (pass prometheus.DefaultRegisterer for the global registry)")
	}
	c := config{waitBuckets: defaultWaitBuckets, holdBuckets: defaultHoldBuckets, extendBuckets: defaultExtendBuckets,
		campaignBkts: defaultCampaignBuckets}
	for _, opt := range opts {
		if opt == nil {
			c.invalid("nil Option")
			continue
		}
		opt.apply(&c)
	}
	if c.err != nil {
		return nil, c.err
	}

	var labels []string
	if c.nameLabel {
		labels = []string{"name"}
	}
	with := func(extra ...string) []string { return append(append([]string(nil), labels...), extra...) }
	counter := func(name, help string, extra ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: c.namespace, Subsystem: "redislock", Name: name, Help: help, ConstLabels: c.constLabels,
		}, with(extra...))
	}
	histogram := func(name, help string, buckets []float64, extra ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.namespace, Subsystem: "redislock", Name: name, Help: help, ConstLabels: c.constLabels,
			Buckets: buckets,
		}, with(extra...))
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: c.namespace, Subsystem: "redislock", Name: name, Help: help, ConstLabels: c.constLabels,
		}, labels)
	}
	m := &metrics{
		acquired:       counter("acquired_total", "Acquire calls that took the lock."),
		notAcquired:    counter("not_acquired_total", "Acquire calls that gave up because another holder had the lock."),
		acquireErrors:  counter("acquire_errors_total", "Acquire calls that failed because Redis could not be reached or refused the command."),
		attempts:       counter("acquire_attempts_total", "Acquire commands sent to Redis, retries included."),
		wait:           histogram("wait_seconds", "Time from an Acquire call to its end, by result (acquired, not_acquired, redis_error); Elect's campaigns are not in it.", c.waitBuckets, "result"),
		campaign:       histogram("campaign_seconds", "Time an Elect campaign lasted, from its start until it led or gave up.", c.campaignBkts),
		held:           gauge("held", "Locks held now, by kind (lock: Acquire, Elect, a multi lock; shared; semaphore: a slot).", with("kind")...),
		waiting:        gauge("waiting", "Callers waiting for a lock now, by kind; Elect's followers are not counted.", with("kind")...),
		leader:         gauge("leader", "1 while a Client of this Observer leads the election called name, 0 after it stopped leading.", "name"),
		hold:           histogram("hold_seconds", "Time locks were held, from acquisition to the release that ended the hold (also after a loss).", c.holdBuckets),
		extend:         histogram("extend_duration_seconds", "Round trip of extension commands (watchdog and Lock.Extend), successful or not.", c.extendBuckets),
		extendFailures: counter("extend_failures_total", "Extensions that failed, by reason (not_held, redis_error, paused: this process did not run in time).", "reason"),
		lost:           counter("lost_total", "Held locks that were lost, by reason (expired, taken, unreachable, max_hold).", "reason"),
		releases:       counter("releases_total", "Releases that reached Redis, by result (released, not_held, redis_error).", "result"),
		failOpen:       counter("fail_open_total", "RunWithLock calls that ran without the lock because Redis could not be reached (WithFailOpen)."),
	}
	o := &Observer{nameLabel: c.nameLabel, m: m, leading: map[string]int{}}
	if !c.nameLabel {
		// Without per-name labels every series is known now: create them
		// at zero, so that rate() and increase() see the first event, and
		// keep them, so that an event costs no label hashing.
		o.counters = map[seriesKey]prometheus.Counter{}
		o.observers = map[seriesKey]prometheus.Observer{}
		for _, vec := range []*prometheus.CounterVec{m.acquired, m.notAcquired, m.acquireErrors, m.attempts, m.failOpen} {
			o.counters[seriesKey{vec, ""}] = vec.WithLabelValues()
		}
		for _, result := range []string{resultAcquired, resultNotAcquired, resultRedisError} {
			o.observers[seriesKey{m.wait, result}] = m.wait.WithLabelValues(result)
		}
		o.observers[seriesKey{m.hold, ""}] = m.hold.WithLabelValues()
		o.observers[seriesKey{m.campaign, ""}] = m.campaign.WithLabelValues()
		o.gauges = map[seriesKey]prometheus.Gauge{}
		for _, k := range kinds {
			o.gauges[seriesKey{m.held, k}] = m.held.WithLabelValues(k)
			o.gauges[seriesKey{m.waiting, k}] = m.waiting.WithLabelValues(k)
		}
		o.observers[seriesKey{m.extend, ""}] = m.extend.WithLabelValues()
		for _, reason := range []string{resultNotHeld, resultRedisError, reasonPaused} {
			o.counters[seriesKey{m.extendFailures, reason}] = m.extendFailures.WithLabelValues(reason)
		}
		for _, reason := range lostReasons {
			o.counters[seriesKey{m.lost, reason}] = m.lost.WithLabelValues(reason)
		}
		for _, result := range []string{resultReleased, resultNotHeld, resultRedisError} {
			o.counters[seriesKey{m.releases, result}] = m.releases.WithLabelValues(result)
		}
	}
	if err := reg.Register(o); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			return nil, fmt.Errorf("redislockprom: the redislock metrics are already registered on this Registerer by another Observer (share that one, or tell them apart with WithNamespace or WithConstLabels): %w", err)
		}
		return nil, fmt.Errorf("redislockprom: registering the redislock metrics: %w", err)
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

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	if o == nil || o.m == nil {
		return
	}
	for _, c := range o.m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	if o == nil || o.m == nil {
		return
	}
	for _, c := range o.m.collectors() {
		c.Collect(ch)
	}
}

// counter returns the series of vec for the lock name and the other label
// value, if the vector has one.
func (o *Observer) counter(vec *prometheus.CounterVec, name string, value ...string) prometheus.Counter {
	if !o.nameLabel {
		if c, ok := o.counters[seriesKey{vec, strings.Join(value, "")}]; ok {
			return c
		}
		return vec.WithLabelValues(value...)
	}
	return vec.WithLabelValues(append([]string{name}, value...)...)
}

// observer is counter for histograms.
func (o *Observer) observer(vec *prometheus.HistogramVec, name string, value ...string) prometheus.Observer {
	if !o.nameLabel {
		if h, ok := o.observers[seriesKey{vec, strings.Join(value, "")}]; ok {
			return h
		}
		return vec.WithLabelValues(value...)
	}
	return vec.WithLabelValues(append([]string{name}, value...)...)
}

// gauge is counter for gauges.
func (o *Observer) gauge(vec *prometheus.GaugeVec, name string, value string) prometheus.Gauge {
	if !o.nameLabel {
		if g, ok := o.gauges[seriesKey{vec, value}]; ok {
			return g
		}
		return vec.WithLabelValues(value)
	}
	return vec.WithLabelValues(name, value)
}

// ObserveAcquire counts the Acquire by result (acquired, not acquired, Redis
// error), adds its attempts, and records its wait time, or an Elect
// campaign's time (redislock_campaign_seconds).
func (o *Observer) ObserveAcquire(e redislock.AcquireEvent) {
	if o == nil || o.m == nil {
		return
	}
	var result string
	switch {
	case e.Acquired:
		result = resultAcquired
		o.counter(o.m.acquired, e.Name).Inc()
	case errors.Is(e.Err, redislock.ErrNotAcquired):
		result = resultNotAcquired
		o.counter(o.m.notAcquired, e.Name).Inc()
	default:
		result = resultRedisError
		o.counter(o.m.acquireErrors, e.Name).Inc()
	}
	if e.Attempts > 0 {
		o.counter(o.m.attempts, e.Name).Add(float64(e.Attempts))
	}
	if e.Campaign {
		o.observer(o.m.campaign, e.Name).Observe(e.Wait.Seconds())
		return
	}
	o.observer(o.m.wait, e.Name, result).Observe(e.Wait.Seconds())
}

// ObserveHold counts the hold in redislock_held while it lasts.
func (o *Observer) ObserveHold(e redislock.HoldEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.gauge(o.m.held, e.Name, e.Kind).Add(delta(e.Began))
}

// ObserveWait counts the caller in redislock_waiting while it waits, but for
// an Elect follower, which makes its election's redislock_leader series (at
// 0) instead: a follower waits as long as the leader leads.
func (o *Observer) ObserveWait(e redislock.WaitEvent) {
	if o == nil || o.m == nil {
		return
	}
	if e.Campaign {
		o.m.leader.WithLabelValues(e.Name)
		return
	}
	o.gauge(o.m.waiting, e.Name, e.Kind).Add(delta(e.Began))
}

// ObserveLeader sets redislock_leader{name} to 1 while a term of a Client
// served lasts, to 0 once none does.
func (o *Observer) ObserveLeader(e redislock.LeaderEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.leading[e.Name] += int(delta(e.Leading))
	leads := 0.0
	if o.leading[e.Name] > 0 {
		leads = 1
	}
	o.m.leader.WithLabelValues(e.Name).Set(leads)
}

// delta is a gauge's change: +1 as a hold, wait or term begins, -1 as it ends.
func delta(began bool) float64 {
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
	o.observer(o.m.extend, e.Name).Observe(e.Latency.Seconds())
	if e.Err != nil {
		reason := resultRedisError
		switch {
		case errors.Is(e.Err, redislock.ErrNotHeld):
			reason = resultNotHeld
		case e.Paused > 0:
			reason = reasonPaused
		}
		o.counter(o.m.extendFailures, e.Name, reason).Inc()
	}
}

// ObserveLost counts the loss by reason.
func (o *Observer) ObserveLost(e redislock.LostEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.counter(o.m.lost, e.Name, lostReason(e.Reason)).Inc()
}

func lostReason(r redislock.LostReason) string {
	if reason, ok := lostReasons[r]; ok {
		return reason
	}
	return "other"
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
	switch {
	case e.Err == nil:
		o.counter(o.m.releases, e.Name, resultReleased).Inc()
	case errors.Is(e.Err, redislock.ErrNotHeld):
		o.counter(o.m.releases, e.Name, resultNotHeld).Inc()
	default:
		o.counter(o.m.releases, e.Name, resultRedisError).Inc()
		return
	}
	o.observer(o.m.hold, e.Name).Observe(e.HeldFor.Seconds())
}

// ObserveFailOpen counts a RunWithLock that ran without the lock.
func (o *Observer) ObserveFailOpen(e redislock.FailOpenEvent) {
	if o == nil || o.m == nil {
		return
	}
	o.counter(o.m.failOpen, e.Name).Inc()
}
