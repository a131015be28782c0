package prescient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/prescient-dev/prescient/driver"
)

// Client schedules, cancels and resolves jobs, and (after Start) fires the
// slots this server owns. It is safe for concurrent use. A Client that is
// never started is a pure scheduling client, as an application process uses.
//
// Client's …Tx methods take the application's transaction as any and check
// its type at run time (ErrTxType); a TypedClient, for an application with one
// store, has the compiler check it instead. Client is the form for code that
// picks its store at run time, as the prescient command does.
type Client struct {
	cfg   Config
	store Store
	drv   driver.Driver
	log   *slog.Logger

	mu   sync.Mutex // serialises Start and Stop
	cron *cron.Cron
	wg   sync.WaitGroup // background work Stop waits for

	// runMu guards what background work reads of the lifecycle. Work in
	// flight takes only runMu, never mu, so it never waits for Start or Stop.
	runMu    sync.Mutex
	running  bool
	workCtx  context.Context // ends when Stop begins: start no new work
	hardCtx  context.Context // ends when the grace is over: interrupt checks
	stopWork context.CancelFunc
	stopNow  context.CancelFunc

	// isolateUntil (Unix ns on the client's clock) is when groups may leave
	// their savepoints out again (see optimistic).
	isolateUntil atomic.Int64
	// attempts holds the ids of the client's attempts still running (see
	// unfinished.go).
	attempts sync.Map

	// firing holds the slots the client is firing, each with a channel
	// closed when that firing ends (see holdSlot).
	firingMu sync.Mutex
	firing   map[time.Time]chan struct{}
	// beatSoon asks the heartbeat loop for a heartbeat now: a firing of a
	// past slot began, which status readers call running once a heartbeat
	// lists it.
	beatSoon chan struct{}
	// sweeping is held by the sweep running, one at a time (see sweep).
	sweeping chan struct{}

	tickMu    sync.Mutex // serialises Tick
	lastGood  time.Time  // the last slot up to which every owned slot fired
	startedAt time.Time
	own       ownership

	// alone is held for reading by every group of checks running, and for
	// writing by a job run alone (runAlone), which so runs with no other.
	alone sync.RWMutex
	// sem holds one token per group of checks running (Config.Workers).
	sem chan struct{}

	unknownMu sync.Mutex
	unknown   map[string]int
	// unknownWarned is when each unknown check was last warned of.
	unknownWarned map[string]time.Time

	// host is the host's clock, the client's, nil when Config.Now was
	// given (see clock.go); skewed says the last reading of the database's
	// clock differed from it by more than clockWarn, and reading is the
	// latest (nil before the first).
	host    func() time.Time
	skewed  atomic.Bool
	reading atomic.Pointer[dbReading]
}

// NewClient returns a client over store. cfg may be nil for all defaults; it
// is copied, defaulted and validated, also against what the store can do
// (automatic ownership needs a store several hosts can share; GroupSize
// must fit the store's cap).
func NewClient(store Store, cfg *Config) (*Client, error) {
	if store == nil {
		return nil, errors.New("prescient: new client: nil store")
	}
	drv := store.Driver()
	var c Config
	if cfg != nil {
		c = *cfg
	}
	var host func() time.Time
	if c.Now == nil {
		host = time.Now
		if c.hostClock != nil {
			host, c.Now = c.hostClock, c.hostClock
		}
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := c.validateFor(drv.Features()); err != nil {
		return nil, err
	}
	if drv.Features().MultiHost {
		drv = &boundedDriver{Driver: drv, limit: c.ServerTimeout, runtime: c.Guards.Runtime, groupDuration: c.GroupDuration, checks: c.Checks}
	}
	return &Client{
		cfg:           c,
		store:         store,
		drv:           drv,
		log:           c.Logger.With("server", c.Server),
		sem:           make(chan struct{}, c.Workers),
		firing:        make(map[time.Time]chan struct{}),
		beatSoon:      make(chan struct{}, 1),
		sweeping:      make(chan struct{}, 1),
		unknown:       make(map[string]int),
		unknownWarned: make(map[string]time.Time),
		host:          host,
	}, nil
}

// validateFor reports a configuration the store cannot carry out.
func (c Config) validateFor(f driver.Features) error {
	var errs []error
	if c.AutoOwnership && !f.MultiHost {
		errs = append(errs, errors.New("config: ownership: automatic ownership spreads slots over servers on several hosts, "+
			"which this store cannot serve (SQLite is for one host): use PostgreSQL, or a static map"))
	}
	if f.MaxGroupSize > 0 && c.GroupSize > f.MaxGroupSize {
		errs = append(errs, fmt.Errorf("config: group_size %d exceeds the store's cap of %d checks per transaction "+
			"(PostgreSQL caches 64 subtransactions per transaction; beyond that other sessions look each one up in pg_subtrans)",
			c.GroupSize, f.MaxGroupSize))
	}
	return errors.Join(errs...)
}

// Config returns the client's configuration, with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Store returns the store the client uses.
func (c *Client) Store() Store { return c.store }

func (c *Client) now() time.Time { return c.cfg.Now().UTC() }
