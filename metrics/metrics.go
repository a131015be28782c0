// Package metrics exposes a prescient server in the Prometheus format.
//
// A Metrics is two things: a prescient.Observer, which the engine tells of
// every check run, slot fired, sweep and failed use of the store (counters
// and histograms), and a prometheus.Collector, which also reports the
// server's state when scraped (gauges: readiness, positions owned, pending,
// upcoming and overdue jobs, incomplete slots, deliveries not delivered).
// Wire it in before the client is built, then point it at the client:
//
//	m := metrics.New(nil)
//	client, err := prescient.NewClient(store, &prescient.Config{Observer: m, …})
//	…
//	m.Watch(client)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(m)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The gauges that come from the database cost a count of the whole pending
// table (Client.JobStats: 0.6 to 2.5 s at a million pending jobs on a small,
// busy PostgreSQL). So they are read in the background, one reading at a
// time and at most once per Opts.CacheFor, whatever the number of scrapers,
// and a scrape serves the latest reading without waiting for the database
// (only the first scrape waits for the first reading). A scrape therefore
// stays fast while the database is slow or away, and prescient_ready still
// says so.
//
// Labels are bounded: check names, outcomes, slot kinds, sweep modes, store
// operations and slot offsets; never an entity, a key or a slot's time.
package metrics

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prescient-dev/prescient"
)

// Defaults for Opts.
const (
	// UpcomingSlotsDefault is how many slots, from the one in progress,
	// prescient_jobs_upcoming covers.
	UpcomingSlotsDefault = 10
	// CacheForDefault is how long a reading of the database serves scrapes.
	CacheForDefault = 30 * time.Second
	// ReadTimeoutDefault bounds one reading of the database.
	ReadTimeoutDefault = 30 * time.Second
	// LedgerRowsDefault is how many of the latest ledger rows
	// prescient_slots_incomplete looks at.
	LedgerRowsDefault = 1000
)

// StoreOpScrape is the operation label of prescient_store_errors_total for
// a failed store read of a scrape.
const StoreOpScrape = "scrape"

// Opts tune a Metrics. The zero value of each field means its default.
type Opts struct {
	// UpcomingSlots is how many slots prescient_jobs_upcoming covers: the
	// slot in progress (slots_ahead="0") and the ones after it. Default
	// UpcomingSlotsDefault.
	UpcomingSlots int
	// CacheFor is how long one reading of the database serves scrapes. A
	// scrape that finds the latest reading older starts a new one in the
	// background and serves the latest meanwhile, so the database is read at
	// most once per CacheFor (a failed reading counts too: a struggling
	// database is not asked again at every scrape). -1 reads at every
	// scrape, which then waits for its reading (for tests). Default
	// CacheForDefault.
	CacheFor time.Duration
	// ReadTimeout bounds one reading of the database. The database's gauges
	// are left out while the latest reading failed. Default
	// ReadTimeoutDefault.
	ReadTimeout time.Duration
	// LedgerRows is how many of the latest ledger rows before the slot in
	// progress prescient_slots_incomplete looks at. Default
	// LedgerRowsDefault.
	LedgerRows int
	// Sinks names the sinks events are delivered to (the configuration's):
	// each is reported in prescient_deliveries, 0 when it has no pending or
	// dead delivery, so that an alert on dead deliveries has a series to
	// read before the first one dies. Sinks with deliveries in the database
	// are reported whether named here or not.
	Sinks []string
}

func (o *Opts) withDefaults() Opts {
	var c Opts
	if o != nil {
		c = *o
	}
	if c.UpcomingSlots <= 0 {
		c.UpcomingSlots = UpcomingSlotsDefault
	}
	if c.CacheFor == 0 {
		c.CacheFor = CacheForDefault
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = ReadTimeoutDefault
	}
	if c.LedgerRows <= 0 {
		c.LedgerRows = LedgerRowsDefault
	}
	c.LedgerRows = min(c.LedgerRows, prescient.SlotsLimitMax) // Client.Slots refuses more
	return c
}

// Metrics collects a prescient server's metrics. Build it with New, pass it
// as prescient.Config.Observer, Watch the client, and register it with a
// prometheus.Registerer. It is safe for concurrent use.
type Metrics struct {
	opts Opts
	now  func() time.Time // the cache's clock

	checks        *prometheus.CounterVec
	checkFailures *prometheus.CounterVec
	checkDuration *prometheus.HistogramVec
	slotLag       *prometheus.HistogramVec
	slotDuration  *prometheus.HistogramVec
	sweeps        *prometheus.CounterVec
	sweptJobs     *prometheus.CounterVec
	storeErrors   *prometheus.CounterVec

	ready, positions, pending, upcoming, overdue, unknown, incomplete, deliveries, readAt *prometheus.Desc

	client atomic.Pointer[prescient.Client]

	readMu sync.Mutex
	last   *reading      // the latest reading of the database
	ahead  chan struct{} // closed when the reading under way ends; nil when none is
}

var _ prescient.Observer = (*Metrics)(nil)
var _ prometheus.Collector = (*Metrics)(nil)

// reading is what one scrape read from the store.
type reading struct {
	client *prescient.Client
	at     time.Time // when it ended, on the cache's clock
	err    error
	// current is the slot in progress when read, on the client's clock.
	current    time.Time
	stats      *prescient.JobStats
	incomplete int
	// deliveries counts the deliveries of events per sink.
	deliveries map[string]*prescient.DeliveryCount
}

// cadence says how often the database gauges are read, for their help text.
func cadence(cacheFor time.Duration) string {
	if cacheFor < 0 {
		return "per scrape"
	}
	return "every " + cacheFor.String() + " (a shorter event may not show in them)"
}

// New returns a Metrics; opts may be nil for all defaults.
func New(opts *Opts) *Metrics {
	o := opts.withDefaults()
	m := &Metrics{
		opts: o,
		now:  time.Now,
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prescient_checks_total",
			Help: "Checks run, per job, by check and outcome: rescheduled, retry, or the history outcome that ended the job (done, failed, guard_max_checks, guard_horizon, guard_past).",
		}, []string{"check", "outcome"}),
		checkFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prescient_check_failures_total",
			Help: "Checks that failed (an error, a panic, an overrun of the runtime guard), retried or not, by check.",
		}, []string{"check"}),
		checkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prescient_check_duration_seconds",
			Help:    "How long a check ran for one job (a batch check's call shared out among its jobs), by check.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"check"}),
		slotLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prescient_slot_lag_seconds",
			Help:    "How long after a slot began its firing started, by kind (fire, catchup, sweep), for the firings that checked a job.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"kind"}),
		slotDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "prescient_slot_duration_seconds",
			Help:    "How long a slot's firing took, by kind (fire, catchup, sweep).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"kind"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prescient_sweeps_total",
			Help: "Sweeps run, by mode (run, reslot).",
		}, []string{"mode"}),
		sweptJobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prescient_swept_jobs_total",
			Help: "Overdue jobs sweeps took: checked (run mode) or moved to the next slot (reslot mode), by mode.",
		}, []string{"mode"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "prescient_store_errors_total",
			Help: "Failed uses of the database, by operation.",
		}, []string{"operation"}),
		ready: prometheus.NewDesc("prescient_ready",
			"1 when the server has started and its last use of the database succeeded (as /readyz), else 0.", nil, nil),
		positions: prometheus.NewDesc("prescient_positions_owned",
			"Positions of the ownership cycle this server fires.", nil, nil),
		pending: prometheus.NewDesc("prescient_jobs_pending",
			"Pending jobs, by check (every registered check, and any other name pending in the database).", []string{"check"}, nil),
		upcoming: prometheus.NewDesc("prescient_jobs_upcoming",
			"Jobs pending in the slot in progress (slots_ahead=\"0\") and in each of the slots after it.", []string{"slots_ahead"}, nil),
		overdue: prometheus.NewDesc("prescient_jobs_overdue",
			"Jobs due in a slot before the one in progress, not yet taken.", nil, nil),
		unknown: prometheus.NewDesc("prescient_jobs_unknown_check",
			"Pending jobs of a check this server has not registered, by check.", []string{"check"}, nil),
		incomplete: prometheus.NewDesc("prescient_slots_incomplete",
			"Slots before the one in progress that the latest ledger rows show started and not finished by any server, and that no live server is firing.", nil, nil),
		deliveries: prometheus.NewDesc("prescient_deliveries",
			"Deliveries of events to sinks not delivered, by sink and state: pending (to be tried, or retried after a failure) and dead "+
				"(every attempt allowed failed: the event never reached the sink until it is queued again). Every sink of the "+
				"configuration is reported, 0 when it has none.", []string{"sink", "state"}, nil),
		readAt: prometheus.NewDesc("prescient_store_read_timestamp_seconds",
			"When the gauges read from the database (prescient_jobs_*, prescient_slots_incomplete, prescient_deliveries) were read, in seconds since "+
				"the Unix epoch. They are read at most once "+cadence(o.CacheFor)+", and left out while a reading fails.", nil, nil),
	}
	for _, mode := range []prescient.SweepMode{prescient.SweepRun, prescient.SweepReslot} {
		m.sweeps.WithLabelValues(string(mode))
		m.sweptJobs.WithLabelValues(string(mode))
	}
	for _, op := range append(slices.Clone(prescient.StoreOps), StoreOpScrape) {
		m.storeErrors.WithLabelValues(op)
	}
	return m
}

// Watch points the scrape-time gauges at c, the started client; before it,
// prescient_ready is 0 and the store's gauges are left out. A server that
// builds a new client (after a failed start) watches the new one.
//
// Every check c runs starts its failure counter at 0, so that an alert on
// its rate sees the series before the first failure, as the store error
// counters are.
func (m *Metrics) Watch(c *prescient.Client) {
	m.client.Store(c)
	if c == nil {
		return
	}
	for _, ch := range c.Config().Checks.All() {
		m.checkFailures.WithLabelValues(ch.Name)
	}
}

// CheckFinished implements prescient.Observer.
func (m *Metrics) CheckFinished(e prescient.CheckEvent) {
	m.checks.WithLabelValues(e.Check, e.Outcome).Inc()
	if e.Err != nil {
		m.checkFailures.WithLabelValues(e.Check).Inc()
	}
	m.checkDuration.WithLabelValues(e.Check).Observe(e.Duration.Seconds())
}

// SlotFired implements prescient.Observer.
func (m *Metrics) SlotFired(e prescient.SlotEvent) {
	if e.Checked > 0 {
		// A firing that checked no job is no lateness of any job:
		// observed, a sweep of a slot holding only jobs of an unknown
		// check (found again by every sweep) would hold a lag alert on,
		// and so would every restart, whose first tick fires the slot in
		// progress as late as the server started into it (up to a whole
		// slot; found by SREs' trials).
		m.slotLag.WithLabelValues(e.Kind).Observe(max(e.Lag, 0).Seconds())
	}
	m.slotDuration.WithLabelValues(e.Kind).Observe(e.Duration.Seconds())
}

// SweepFinished implements prescient.Observer.
func (m *Metrics) SweepFinished(e prescient.SweepEvent) {
	m.sweeps.WithLabelValues(string(e.Mode)).Inc()
	m.sweptJobs.WithLabelValues(string(e.Mode)).Add(float64(e.Jobs))
}

// StoreError implements prescient.Observer.
func (m *Metrics) StoreError(e prescient.StoreErrorEvent) {
	m.storeErrors.WithLabelValues(e.Op).Inc()
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.vecs() {
		c.Describe(ch)
	}
	for _, d := range []*prometheus.Desc{m.ready, m.positions, m.pending, m.upcoming, m.overdue, m.unknown, m.incomplete, m.deliveries, m.readAt} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the gauges, read now (those of
// the database through the cache), then the counters and histograms, which
// then count a reading that failed.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.collectGauges(ch)
	for _, c := range m.vecs() {
		c.Collect(ch)
	}
}

func (m *Metrics) collectGauges(ch chan<- prometheus.Metric) {
	c := m.client.Load()
	ready := 0.0
	if c != nil && c.Ready() == nil {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(m.ready, prometheus.GaugeValue, ready)
	if c == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.positions, prometheus.GaugeValue, float64(len(c.Positions())))
	r := m.read(c)
	if r == nil || r.err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.readAt, prometheus.GaugeValue, float64(r.at.UnixNano())/1e9)
	registry := c.Config().Checks
	for _, check := range registry.All() {
		if _, ok := r.stats.ByCheck[check.Name]; !ok {
			ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, 0, check.Name)
		}
	}
	for name, n := range r.stats.ByCheck {
		ch <- prometheus.MustNewConstMetric(m.pending, prometheus.GaugeValue, float64(n), name)
		if _, ok := registry.Lookup(name); !ok {
			ch <- prometheus.MustNewConstMetric(m.unknown, prometheus.GaugeValue, float64(n), name)
		}
	}
	grid := c.Config().Grid
	ahead := make([]int, m.opts.UpcomingSlots)
	for _, l := range r.stats.Upcoming {
		if i := int(l.Slot.Sub(r.current) / grid.Resolution); i >= 0 && i < len(ahead) {
			ahead[i] += l.Jobs
		}
	}
	for i, n := range ahead {
		ch <- prometheus.MustNewConstMetric(m.upcoming, prometheus.GaugeValue, float64(n), strconv.Itoa(i))
	}
	ch <- prometheus.MustNewConstMetric(m.overdue, prometheus.GaugeValue, float64(r.stats.Overdue))
	ch <- prometheus.MustNewConstMetric(m.incomplete, prometheus.GaugeValue, float64(r.incomplete))
	sinks := make(map[string]bool)
	for _, s := range m.opts.Sinks {
		sinks[s] = true
	}
	for s := range r.deliveries {
		sinks[s] = true
	}
	for _, s := range slices.Sorted(maps.Keys(sinks)) {
		var n prescient.DeliveryCount
		if d := r.deliveries[s]; d != nil {
			n = *d
		}
		ch <- prometheus.MustNewConstMetric(m.deliveries, prometheus.GaugeValue, float64(n.Pending), s, "pending")
		ch <- prometheus.MustNewConstMetric(m.deliveries, prometheus.GaugeValue, float64(n.Dead), s, "dead")
	}
}

func (m *Metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.checks, m.checkFailures, m.checkDuration, m.slotLag, m.slotDuration, m.sweeps, m.sweptJobs, m.storeErrors}
}

// read returns the latest reading of the database for c, and starts a new
// one in the background when it is older than CacheFor and none is under
// way. It waits for that reading only when it has none for c to serve (the
// first scrape, or CacheFor -1); it returns nil if that one is not done
// within ReadTimeout either. A reading is never changed once made: scrapes
// read it concurrently.
func (m *Metrics) read(c *prescient.Client) *reading {
	m.readMu.Lock()
	r := m.last
	if r != nil && r.client != c {
		r = nil
	}
	if r == nil || m.opts.CacheFor < 0 || m.now().Sub(r.at) >= m.opts.CacheFor {
		if m.ahead == nil {
			m.ahead = make(chan struct{})
			go m.refresh(c, m.ahead)
		}
		if r == nil || m.opts.CacheFor < 0 {
			ahead := m.ahead
			m.readMu.Unlock()
			select {
			case <-ahead:
			case <-time.After(m.opts.ReadTimeout):
			}
			m.readMu.Lock()
			if r = m.last; r != nil && r.client != c {
				r = nil
			}
		}
	}
	m.readMu.Unlock()
	return r
}

// refresh reads the database for c, makes it the latest reading and closes
// done.
func (m *Metrics) refresh(c *prescient.Client, done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.ReadTimeout)
	defer cancel()
	r := &reading{client: c}
	r.err = m.readStore(ctx, c, r)
	if r.err != nil {
		m.storeErrors.WithLabelValues(StoreOpScrape).Inc()
	}
	m.readMu.Lock()
	defer m.readMu.Unlock()
	r.at = m.now()
	m.last, m.ahead = r, nil
	close(done)
}

// readStore reads the pending table's summary, the latest ledger rows and
// the deliveries' counts into r.
func (m *Metrics) readStore(ctx context.Context, c *prescient.Client, r *reading) error {
	var err error
	if r.stats, err = c.JobStats(ctx, m.opts.UpcomingSlots); err != nil {
		return err
	}
	// The slot in progress after JobStats: if one began meanwhile, the
	// slot JobStats took for current is dropped from the upcoming ones, as
	// it should be, rather than every offset shifting by one.
	pc := c.Config()
	r.current = pc.Grid.Floor(pc.Now().UTC())
	recs, cut, err := c.LatestSlots(ctx, r.current, m.opts.LedgerRows)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	servers, err := c.Store().Driver().ServerList(ctx)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	// A slot is incomplete when no server finished it or fires it now (a
	// live server firing it past its end: see prescient.JudgeSlots).
	_, r.incomplete = prescient.JudgeSlots(recs, cut, servers, pc.Now().UTC(), r.current, pc.ServerTimeout)
	if r.deliveries, err = c.DeliveryCounts(ctx, r.current); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
