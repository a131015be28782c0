package prescient

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/slots"
)

// Defaults for Config.
const (
	MaxFailuresDefault      = 5
	MaxUnfinishedDefault    = 3
	RetryBackoffMaxDefault  = time.Hour
	WorkersDefault          = 10
	BatchSizeDefault        = 100
	GroupSizeDefault        = 50
	GroupDurationDefault    = time.Second
	SweepScheduleDefault    = "*/5 * * * *"
	HistoryRetentionDefault = 30 * 24 * time.Hour
	PruneScheduleDefault    = "17 * * * *"
	ShutdownGraceDefault    = 30 * time.Second
	HeartbeatDefault        = 5 * time.Second
	ServerTimeoutDefault    = 30 * time.Second
)

// SweepMode says what a sweep does with overdue jobs.
type SweepMode string

const (
	// SweepRun runs overdue jobs now, slot by slot, oldest first, up to 4
	// slots at once (the default).
	SweepRun SweepMode = "run"
	// SweepReslot moves overdue jobs to the next slot, where its owner fires them.
	SweepReslot SweepMode = "reslot"
)

// ParseSweepMode returns the mode named s.
func ParseSweepMode(s string) (SweepMode, error) {
	switch SweepMode(s) {
	case SweepRun, SweepReslot:
		return SweepMode(s), nil
	}
	return "", fmt.Errorf("unknown sweep mode %q (want %q or %q)", s, SweepRun, SweepReslot)
}

// Config configures a Client. The zero value of every field means its default;
// WithDefaults fills them in.
type Config struct {
	// Server names this server in the ledger, in history and in the
	// ownership map. Default: the host name.
	Server string
	// FinishedBy is what history records as finished_by for the jobs this
	// client's Cancel and Resolve calls (and their Tx forms) finish: a
	// name as Server is. Default "api"; the CLI's commands say "cli".
	FinishedBy string
	// Grid is the slot grid. Default: slots.ResolutionDefault with
	// slots.CycleDefault. A client that only schedules (an application's)
	// must use the servers' grid, or its jobs land in slots no server
	// fires: set it as the servers do, or to RecordedGrid.
	Grid slots.Grid
	// Ownership is the static map of which server fires which position of the
	// grid's cycle. Empty: this server fires every slot.
	Ownership slots.Ownership
	// AutoOwnership spreads the positions over the live servers instead of
	// using a static map: each server registers and heartbeats in the store,
	// and the positions (slots.Assign) move when a server joins or stops
	// heartbeating for ServerTimeout. It excludes Ownership.
	AutoOwnership bool
	// Heartbeat is how often the server records that it is alive (and, with
	// AutoOwnership, recomputes its positions). Default HeartbeatDefault.
	Heartbeat time.Duration
	// ServerTimeout is how long after its last heartbeat a server counts as
	// gone: its positions move to the others, which catch up the slots it
	// left incomplete. It must exceed twice Heartbeat. Default
	// ServerTimeoutDefault. On a database server (PostgreSQL) it also bounds
	// each statement of the engine's own protocol (more for a call that may
	// wait for a pool connection), and a heartbeat gives up after half of
	// it, so that a primary that hangs holds a firing for a few such bounds
	// rather than until TCP gives up (see docs/ha.md).
	ServerTimeout time.Duration
	// Checks holds the registered checks. Default: an empty registry (the
	// client can still schedule, cancel and resolve).
	Checks *checks.Registry
	// Guards are the limits applied to every check, unless a check overrides
	// them. Zero fields take the guards package defaults.
	Guards guards.Limits
	// MaxFailures is how many failed checks in a row end a job: the
	// MaxFailures-th consecutive failure moves it to history as failed.
	// Default MaxFailuresDefault.
	MaxFailures int
	// MaxUnfinished is how many times a job's check may start without
	// finishing before the job ends failed: a check that kills its server
	// (os.Exit, an out-of-memory kill, a fatal runtime error) would otherwise
	// crash-loop every server that runs it. Before a group runs, the engine
	// records the attempt (one row for the group); the group's commit ends
	// it. A job named by an attempt left behind runs on its own (alone, one
	// at a time, when one more crash would end it), so that the jobs that
	// merely shared a group with the culprit clear themselves; a job named
	// by MaxUnfinished attempts left behind ends
	// failed without running. A database outage or a killed server leaves
	// attempts behind too: their jobs run once more on their own, and
	// finish. At least 2; default MaxUnfinishedDefault.
	MaxUnfinished int
	// RetryBackoffMax caps the delay before a failed check is retried. Retries
	// back off exponentially from one slot: 1, 2, 4, … slots after the failure,
	// never less than one slot. Default RetryBackoffMaxDefault.
	RetryBackoffMax time.Duration
	// Workers caps the groups of checks running at once. A group is one
	// transaction on one connection of the store: up to GroupSize jobs of
	// single-job checks, run one after the other, or one call of a batch
	// check. So up to Workers checks (or batch calls) run at once, and a
	// PostgreSQL store's pool needs at least Workers connections for them;
	// one more lets a group whose claim skipped jobs held elsewhere narrow
	// its attempt beside its transaction instead of rolling back.
	// postgres.Open sizes its pool so (postgres.Opts.Workers), up to 50
	// connections, unless told otherwise, and Start warns when the store's
	// pool is no larger than Workers. Default WorkersDefault.
	Workers int
	// BatchSize is how many due jobs a batch check is handed at a time,
	// unless the check sets its own (checks.Opts.BatchSize); a job that
	// failed before (FailureCount > 0) is handed alone. Default
	// BatchSizeDefault.
	BatchSize int
	// GroupSize is how many jobs of single-job checks one transaction runs,
	// one after the other, each check's writes kept apart from the others'
	// (see SavepointEveryCheck): a
	// group costs one claim, one statement applying every job's new state and
	// one commit, where a transaction per job would cost one of each per job.
	// A check's writes still commit or roll back on their own merits: one that
	// fails, panics or overruns has only its own writes undone. Locks a check
	// takes are held until its group commits. On PostgreSQL it may be at most
	// 64 (see postgres.MaxGroupSize). 1 runs each check in its own
	// transaction. Default GroupSizeDefault.
	GroupSize int
	// SavepointEveryCheck runs every single-job check in a savepoint of its
	// own from the start. By default a group leaves the savepoints out while
	// its checks succeed (they cost it about 15% of its speed on PostgreSQL);
	// when one fails, the group's transaction is rolled back and the group runs
	// again with a savepoint per check, without the failed one, so the checks
	// that ran before it run twice: their writes through job.Tx still commit
	// once, but an effect outside the database (a webhook) happens twice.
	// After a failure the client uses savepoints for a minute. Set this when
	// checks have effects outside the database that must not repeat for
	// another check's failure. The zero value (false) is optimistic.
	SavepointEveryCheck bool
	// GroupDuration bounds how long a group keeps starting checks: once a
	// group has run this long it commits what it has done and goes on with its
	// remaining jobs in a new transaction, so that slow checks do not keep a
	// transaction (and the locks of the checks before them) open for long.
	// Default GroupDurationDefault.
	GroupDuration time.Duration
	// SweepMode is the mode of the start-up, scheduled and catch-up sweeps.
	// Default SweepRun.
	SweepMode SweepMode
	// SweepSchedule is a cron spec (five fields, or @every …) for the
	// scheduled sweep. "-" disables it. Default SweepScheduleDefault.
	SweepSchedule string
	// SweepOnStartDisabled turns off the sweep Start runs. The zero value
	// (false) sweeps at start-up.
	SweepOnStartDisabled bool
	// HistoryRetention is how long history records are kept, and events
	// whose deliveries are done; -1 keeps them forever. Default
	// HistoryRetentionDefault.
	HistoryRetention time.Duration
	// PruneSchedule is the cron spec of history pruning. Default
	// PruneScheduleDefault; "-" disables it.
	PruneSchedule string
	// ShutdownGrace is how long Stop waits for in-flight checks before it
	// interrupts them (their jobs stay due, untouched). Default
	// ShutdownGraceDefault; it cannot be zero (that is the default).
	ShutdownGrace time.Duration
	// Now is the clock. Default time.Now. Every decision about what is due
	// reads it, so tests and simulations can run on a fake clock. On the
	// host's clock (Now left nil), a client on a store with a clock of its
	// own (PostgreSQL) also reads the database's: see clock.go.
	Now func() time.Time
	// hostClock stands in for the host's clock when Now is nil (tests skew
	// it).
	hostClock func() time.Time
	// Logger receives the engine's logs. Default slog.Default().
	Logger *slog.Logger
	// Observer is told of every check run, slot fired, sweep and failed use
	// of the store, as they happen (see Observer; package metrics turns them
	// into Prometheus metrics). Default NopObserver{}.
	Observer Observer
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Server == "" {
		c.Server, _ = os.Hostname()
		if c.Server == "" {
			c.Server = "prescient"
		}
	}
	if c.Grid.Resolution == 0 {
		c.Grid.Resolution = slots.ResolutionDefault
		if c.Grid.Cycle == 0 {
			c.Grid.Cycle = slots.CycleDefault
		}
	}
	if c.Checks == nil {
		c.Checks = &checks.Registry{}
	}
	c.Guards = c.Guards.WithDefaults()
	if c.MaxFailures == 0 {
		c.MaxFailures = MaxFailuresDefault
	}
	if c.MaxUnfinished == 0 {
		c.MaxUnfinished = MaxUnfinishedDefault
	}
	if c.RetryBackoffMax == 0 {
		c.RetryBackoffMax = RetryBackoffMaxDefault
	}
	if c.Workers == 0 {
		c.Workers = WorkersDefault
	}
	if c.BatchSize == 0 {
		c.BatchSize = BatchSizeDefault
	}
	if c.GroupSize == 0 {
		c.GroupSize = GroupSizeDefault
	}
	if c.GroupDuration == 0 {
		c.GroupDuration = GroupDurationDefault
	}
	if c.SweepMode == "" {
		c.SweepMode = SweepRun
	}
	if c.SweepSchedule == "" {
		c.SweepSchedule = SweepScheduleDefault
	}
	if c.HistoryRetention == 0 {
		c.HistoryRetention = HistoryRetentionDefault
	}
	if c.PruneSchedule == "" {
		c.PruneSchedule = PruneScheduleDefault
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = ShutdownGraceDefault
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = HeartbeatDefault
	}
	if c.FinishedBy == "" {
		c.FinishedBy = "api"
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = ServerTimeoutDefault
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

// validateSchedule reports what is wrong with a cron spec of the sweep or
// the prune: one cron does not read, an @every of less than a second (cron
// runs it every second whatever it says: 0s, -5s, 100ms) or not of whole
// seconds (1500ms runs every second), or a spec that never comes (the 30th
// of February).
func validateSchedule(spec string, now time.Time) error {
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return fmt.Errorf("%w (write a cron spec of five fields, such as \"*/15 * * * *\", or \"@every 5s\")", err)
	}
	// As cron reads it: after a time zone (TZ=… or CRON_TZ=…), if any.
	rest := strings.TrimSpace(spec)
	if strings.HasPrefix(rest, "TZ=") || strings.HasPrefix(rest, "CRON_TZ=") {
		_, rest, _ = strings.Cut(rest, " ")
	}
	if every, ok := strings.CutPrefix(strings.TrimSpace(rest), "@every "); ok {
		if d, err := time.ParseDuration(strings.TrimSpace(every)); err == nil && d < time.Second {
			return fmt.Errorf("runs every %s: an @every must be at least 1s (such as \"@every 1m\")", d)
		} else if err == nil && d%time.Second != 0 {
			// cron.Every drops the fraction.
			return fmt.Errorf("runs every %s: cron keeps whole seconds and would run it every %s; write a whole number of seconds",
				d, d.Truncate(time.Second))
		}
	}
	if sched.Next(now).IsZero() {
		return errors.New("never comes: no time in the next five years matches it")
	}
	return nil
}

// Validate reports the first field that is wrong, naming it.
func (c Config) Validate() error {
	if err := checks.ValidateName("server", c.Server); err != nil {
		return fmt.Errorf("config: server: %w", err)
	}
	// Written into history, read by people and their terminals as a
	// server's name is: the same rule.
	if err := checks.ValidateName("finished_by", c.FinishedBy); err != nil {
		return fmt.Errorf("config: FinishedBy: %w", err)
	}
	if err := c.Grid.Validate(); err != nil {
		return fmt.Errorf("config: slots: %w", err)
	}
	if err := c.Ownership.Validate(c.Grid.Positions()); err != nil {
		return fmt.Errorf("config: ownership: %w", err)
	}
	if err := c.Guards.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var errs []error
	if c.MaxFailures < 1 {
		errs = append(errs, fmt.Errorf("config: max_failures %d must be at least 1", c.MaxFailures))
	}
	if c.MaxUnfinished < 2 {
		errs = append(errs, fmt.Errorf("config: max_unfinished %d must be at least 2: a crash names every job of the "+
			"group that was running, and only a second one, with the job run alone, names the culprit", c.MaxUnfinished))
	}
	if c.RetryBackoffMax < 0 {
		errs = append(errs, fmt.Errorf("config: retry_backoff_max %s must not be negative", c.RetryBackoffMax))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("config: workers %d must be at least 1", c.Workers))
	}
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("config: batch_size %d must be at least 1", c.BatchSize))
	}
	if c.GroupSize < 1 {
		errs = append(errs, fmt.Errorf("config: group_size %d must be at least 1", c.GroupSize))
	}
	if c.GroupDuration < 0 {
		errs = append(errs, fmt.Errorf("config: group_duration %s must be positive", c.GroupDuration))
	}
	if _, err := ParseSweepMode(string(c.SweepMode)); err != nil {
		errs = append(errs, fmt.Errorf("config: sweep mode: %w", err))
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	for _, s := range []struct{ name, spec string }{{"sweep schedule", c.SweepSchedule}, {"prune schedule", c.PruneSchedule}} {
		if s.spec == "-" {
			continue
		}
		if err := validateSchedule(s.spec, now()); err != nil {
			errs = append(errs, fmt.Errorf("config: %s %q: %w", s.name, s.spec, err))
		}
	}
	if c.HistoryRetention < 0 && c.HistoryRetention != -1 {
		errs = append(errs, fmt.Errorf("config: history retention %s must be positive, or -1 to keep forever", c.HistoryRetention))
	}
	if c.AutoOwnership && len(c.Ownership) > 0 {
		errs = append(errs, errors.New("config: ownership: automatic ownership and a static map exclude each other; choose one"))
	}
	if c.Heartbeat <= 0 {
		errs = append(errs, fmt.Errorf("config: heartbeat %s must be positive", c.Heartbeat))
	} else if c.ServerTimeout <= 2*c.Heartbeat {
		errs = append(errs, fmt.Errorf("config: server timeout %s must exceed twice the heartbeat %s, or live servers would be taken for gone", c.ServerTimeout, c.Heartbeat))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("config: shutdown grace %s must not be negative", c.ShutdownGrace))
	}
	return errors.Join(errs...)
}
