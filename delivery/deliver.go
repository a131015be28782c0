package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// Delivery is one event's delivery to one sink, as a Sink is handed it:
// Attempts is the number of the attempt under way (1 for the first).
type Delivery = driver.Delivery

// Event is a recorded event.
type Event = driver.Event

// Sink sends events to one destination.
type Sink interface {
	// Deliver sends d.Event, within ctx (which ends at the sink's timeout).
	// It returns nil when the destination accepted the event; otherwise
	// the error says why, and the attempt is retried or, the last one, the
	// delivery ends dead. status is what the destination answered (an
	// HTTP status), 0 when it answered nothing. Deliver may be called for
	// several deliveries at once.
	Deliver(ctx context.Context, d *Delivery) (status int, err error)
}

// RetryAfter is implemented by a Deliver error that carries the
// destination's own wish for a delay (an HTTP Retry-After): the retry waits
// at least that long, at most the backoff's Max.
type RetryAfter interface {
	RetryAfter() time.Duration
}

// Target is a named sink and how its deliveries are tried.
type Target struct {
	// Name is the sink's name, as checks name it in checks.Opts.Sinks.
	Name string
	Sink Sink
	// MaxAttempts is how many attempts a delivery gets before it ends dead.
	// Default MaxAttemptsDefault.
	MaxAttempts int
	// Timeout bounds one attempt. Default TimeoutDefault.
	Timeout time.Duration
	// Backoff spaces the attempts.
	Backoff Backoff
}

// Target defaults.
const (
	MaxAttemptsDefault = 10
	TimeoutDefault     = 10 * time.Second
)

// Deliverer defaults.
const (
	// PollDefault is how often a sink's worker looks for due deliveries
	// when its last look found fewer than a batch.
	PollDefault = time.Second
	// BatchDefault is how many sends a worker keeps under way; it claims
	// more as they end.
	BatchDefault = 8
	// leaseMargin is added to a sink's timeout for the lease of an attempt:
	// the time to record the result after the timeout.
	leaseMargin = 5 * time.Second
	// finishTimeout bounds recording a result, also after Stop's grace.
	finishTimeout = 10 * time.Second
)

// Config configures a Deliverer.
type Config struct {
	// Server names this server as the owner of the leases it takes.
	Server string
	// Targets are the sinks to deliver to, one worker each. Deliveries to
	// sinks not listed wait for a server that has them.
	Targets []Target
	// Now is the clock that decides what is due and when to retry. Default
	// time.Now.
	Now func() time.Time
	// Logger receives a line per retry, dead delivery and store error.
	// Default slog.Default().
	Logger *slog.Logger
	// Poll and Batch: see PollDefault and BatchDefault.
	Poll  time.Duration
	Batch int
}

// Deliverer runs the workers of the sinks. Start it once; Stop stops it.
// DeliverDue runs one round of a sink's worker by hand.
type Deliverer struct {
	drv     driver.Driver
	cfg     Config
	targets map[string]*Target
	log     *slog.Logger
	wake    []chan struct{}

	mu       sync.Mutex
	started  bool
	stopWork context.CancelFunc // stop claiming
	stopHard context.CancelFunc // cancel the sends under way
	wg       sync.WaitGroup
	// interrupted counts the sends Stop cut short (cutting set): it reports
	// them, and nothing when none was under way as the grace ended.
	cutting     atomic.Bool
	interrupted atomic.Int32
}

// New returns a Deliverer over drv. The targets' names must be valid and
// distinct, each with a Sink.
func New(drv driver.Driver, cfg *Config) (*Deliverer, error) {
	c := *cfg
	c.Targets = slices.Clone(cfg.Targets)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Poll <= 0 {
		c.Poll = PollDefault
	}
	if c.Batch <= 0 {
		c.Batch = BatchDefault
	}
	d := &Deliverer{drv: drv, cfg: c, targets: make(map[string]*Target), log: c.Logger}
	for i := range c.Targets {
		t := c.Targets[i]
		if err := checks.ValidateName("sink", t.Name); err != nil {
			return nil, fmt.Errorf("delivery: %w", err)
		}
		if t.Sink == nil {
			return nil, fmt.Errorf("delivery: sink %s has no Sink", t.Name)
		}
		if _, dup := d.targets[t.Name]; dup {
			return nil, fmt.Errorf("delivery: sink %s is listed twice", t.Name)
		}
		if t.MaxAttempts <= 0 {
			t.MaxAttempts = MaxAttemptsDefault
		}
		if t.Timeout <= 0 {
			t.Timeout = TimeoutDefault
		}
		t.Backoff = t.Backoff.withDefaults()
		d.targets[t.Name] = &t
		d.cfg.Targets[i] = t
	}
	return d, nil
}

// Start starts one worker per sink. Each claims its sink's due deliveries,
// sends them and records the results, then looks again at once if it found
// a full batch, else after Poll or when Wake is called.
func (d *Deliverer) Start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return
	}
	d.started = true
	work, stopWork := context.WithCancel(context.Background())
	hard, stopHard := context.WithCancel(context.Background())
	d.stopWork, d.stopHard = stopWork, stopHard
	for _, t := range d.cfg.Targets {
		wake := make(chan struct{}, 1)
		d.wake = append(d.wake, wake)
		d.wg.Go(func() { d.work(work, hard, t.Name, wake) })
	}
}

// Wake makes every worker look for due deliveries now rather than at its
// next poll (after a slot fired, say). It never blocks.
func (d *Deliverer) Wake() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// Stop stops claiming deliveries (a claim already sent finishes), lets the
// sends under way finish until ctx ends, then cancels them (an attempt cut short this way does not count: it
// is due again at once, for any server), and returns once every result is
// recorded. It returns ctx's error if it had to cancel sends; not when
// ctx ends with nothing under way, even if it had ended before the call.
func (d *Deliverer) Stop(ctx context.Context) error {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		return nil
	}
	d.stopWork()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		d.stopHard()
		return nil
	case <-ctx.Done():
		// The grace may have ended before Stop was called (the checks'
		// shutdown took it all): workers that were idle are merely
		// returning, and nothing of theirs is cut short.
		d.cutting.Store(true)
		d.stopHard()
		<-done
		if d.interrupted.Load() == 0 {
			return nil
		}
		return ctx.Err()
	}
}

// work is the loop of the worker of sink. It keeps up to Batch sends under
// way, each recording its own result, and claims more as they end: a send
// its receiver holds until the timeout delays none of the sink's others
// (waiting for a whole batch to end, one hanging event held every event of
// the sink raised after it for up to the timeout, at every attempt).
func (d *Deliverer) work(work, hard context.Context, sink string, wake <-chan struct{}) {
	t := d.targets[sink]
	var (
		lastErr  string
		sends    sync.WaitGroup
		inflight int
	)
	// Every send records its result before the worker returns: Stop waits
	// for the workers.
	defer sends.Wait()
	ended := make(chan struct{}, d.cfg.Batch)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		claim := true
		select {
		case <-work.Done():
			return
		case <-wake:
		case <-timer.C:
		case <-ended:
			inflight--
			// Claim again once half a batch is free, not after every send.
			claim = d.cfg.Batch-inflight >= max(1, d.cfg.Batch/2)
		}
		if work.Err() != nil {
			return
		}
		free := d.cfg.Batch - inflight
		if !claim || free == 0 {
			continue // a send that ends wakes the loop
		}
		// The claim runs under hard, not work: Stop must not cut a claim
		// short once it is sent, or the store may commit a lease (an attempt
		// counted) whose deliveries this worker never sends. A claim under
		// way when Stop begins finishes, and its deliveries are sent within
		// the grace like any send under way.
		ds, err := d.claim(hard, t, free)
		switch {
		case err != nil && work.Err() == nil:
			if msg := err.Error(); msg != lastErr {
				d.log.Warn("delivery: cannot read the due deliveries; retrying", "sink", sink, "error", err)
				lastErr = msg
			}
		case err == nil && lastErr != "":
			d.log.Info("delivery: the store answers again", "sink", sink)
			lastErr = ""
		}
		for _, dl := range ds {
			inflight++
			sends.Go(func() {
				d.attempt(hard, t, dl)
				ended <- struct{}{}
			})
		}
		wait := d.cfg.Poll
		if err == nil && len(ds) >= free {
			wait = 0 // a full claim: more may be due
		}
		timer.Reset(wait)
	}
}

// DeliverDue claims the deliveries of sink due now (at most a batch), sends
// them at once, records their results, and returns how many it claimed.
func (d *Deliverer) DeliverDue(ctx context.Context, sink string) (int, error) {
	t, ok := d.targets[sink]
	if !ok {
		return 0, fmt.Errorf("delivery: no sink %s", sink)
	}
	ds, err := d.claim(ctx, t, d.cfg.Batch)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	for _, dl := range ds {
		wg.Go(func() { d.attempt(ctx, t, dl) })
	}
	wg.Wait()
	return len(ds), nil
}

// claim leases up to limit deliveries of t due now, each for its timeout and
// a margin.
func (d *Deliverer) claim(ctx context.Context, t *Target, limit int) ([]*Delivery, error) {
	now := d.cfg.Now().UTC()
	return d.drv.DeliveriesClaim(ctx, &driver.DeliveriesClaimParams{
		Sink: t.Name, Now: now, LeaseUntil: now.Add(t.Timeout + leaseMargin), Server: d.cfg.Server, Limit: limit})
}

// errInterrupted is the last error of an attempt cut short by Stop.
var errInterrupted = errors.New("interrupted: the server stopped while sending")

// attempt sends one claimed delivery and records the result.
func (d *Deliverer) attempt(hard context.Context, t *Target, dl *Delivery) {
	e := dl.Event
	p := &driver.DeliveryFinishParams{EventID: e.ID, Sink: dl.Sink, Attempt: dl.Attempts, Lease: dl.NextAttemptAt, Attempts: dl.Attempts}
	var (
		status int
		err    error
	)
	if dl.Attempts > t.MaxAttempts {
		// No attempt left: the last one allowed never recorded a result
		// (its server died while sending), or max_attempts was lowered
		// since. Which, the delivery does not tell; the last result
		// recorded is kept either way.
		last := dl.LastError
		if last == "" {
			last = "none"
		}
		err = fmt.Errorf("no attempt left: %d started, max_attempts is %d (an attempt whose server stopped while sending records no result); last result recorded: %s",
			dl.Attempts-1, t.MaxAttempts, last)
		p.Attempts = t.MaxAttempts
		p.Status, p.Err = dl.LastStatus, err.Error()
		p.State = driver.DeliveryDead
	} else {
		ctx, cancel := context.WithTimeout(hard, t.Timeout)
		status, err = t.Sink.Deliver(ctx, dl)
		cancel()
		p.Status = status
		if err != nil {
			p.Err = err.Error()
		}
		now := d.cfg.Now().UTC()
		switch {
		case err == nil:
			p.State = driver.DeliveryDelivered
		case hard.Err() != nil:
			if d.cutting.Load() { // not a DeliverDue whose caller gave up
				d.interrupted.Add(1)
			}
			p.State, p.NextAttemptAt, p.Attempts, p.Err = driver.DeliveryPending, now, dl.Attempts-1, errInterrupted.Error()
		case dl.Attempts >= t.MaxAttempts:
			p.State = driver.DeliveryDead
		default:
			wait := t.Backoff.Delay(dl.Attempts)
			var ra RetryAfter
			if errors.As(err, &ra) {
				wait = max(wait, min(ra.RetryAfter(), t.Backoff.Max))
			}
			p.State, p.NextAttemptAt = driver.DeliveryPending, now.Add(wait)
		}
	}
	p.Now = d.cfg.Now().UTC()
	if p.NextAttemptAt.IsZero() {
		p.NextAttemptAt = p.Now
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hard), finishTimeout)
	defer cancel()
	recorded, ferr := d.drv.DeliveryFinish(ctx, p)
	attrs := []any{"sink", dl.Sink, "event_id", e.ID, "idempotency_key", e.IdempotencyKey, "attempts", p.Attempts}
	switch {
	case ferr != nil:
		// The lease runs out and the delivery is tried again: at least once.
		d.log.Warn("delivery: cannot record the result; the delivery will be tried again when its lease ends",
			append(attrs, "state", p.State, "error", ferr)...)
		return
	case !recorded:
		d.log.Warn("delivery: the lease ran out before the result was recorded; another attempt took over",
			append(attrs, "state", p.State)...)
		return
	}
	switch p.State {
	case driver.DeliveryDelivered:
		d.log.Debug("delivered", append(attrs, "status", status)...)
	case driver.DeliveryDead:
		d.log.Error("delivery dead: no more attempts", append(attrs, "max_attempts", t.MaxAttempts, "status", p.Status, "error", p.Err)...)
	default:
		if p.Err != errInterrupted.Error() {
			d.log.Warn("delivery failed, will retry", append(attrs, "status", status, "retry_at", p.NextAttemptAt, "error", err)...)
		}
	}
}
