package prescient

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// PayloadMax is the largest payload, in bytes of JSON, a job may carry. The
// payload is a hint for the check (an amount, a locale), not a data store.
// See checks.ValidatePayload for what else a payload must be.
const PayloadMax = checks.PayloadMax

// KeyMax is the longest entity key accepted, in bytes. See
// checks.ValidateKey for the characters a key may not hold.
const KeyMax = checks.KeyMax

// ScheduleParams describes one check to schedule.
type ScheduleParams struct {
	// Entity and Key name the watched thing, e.g. "order" and "42".
	Entity string
	Key    string
	// Check names the registered check to run.
	Check string
	// At is the earliest time the check may run. It is rounded up to the slot
	// grid; a time that is not after now is moved to the next slot. At must
	// lie in [slots.MinTime, slots.MaxTime), and so must the slot it rounds
	// up to; otherwise scheduling fails with an error wrapping ErrOutOfRange.
	At time.Time
	// Payload, if not nil, is stored as JSON and handed to the check
	// (a json.RawMessage or a []byte, such as json.Marshal returns, is taken
	// as JSON already: stored as is on SQLite, as jsonb normalises it on
	// PostgreSQL; a nil one, a job's Payload when it has none, is no
	// payload). It must pass
	// checks.ValidatePayload: at most PayloadMax bytes of UTF-8 JSON,
	// nesting at most checks.PayloadDepthMax deep, without \u0000.
	Payload any
	// OnConflict says what happens when the job is already pending.
	// Default ConflictReplace.
	OnConflict ConflictRule
}

// Schedule upserts one job in its own transaction and returns the pending row.
func (c *Client) Schedule(ctx context.Context, p ScheduleParams) (*Job, error) {
	return c.scheduleOne(ctx, nil, false, p)
}

// ScheduleTx is Schedule inside the caller's transaction tx (a pgx.Tx for the
// PostgreSQL store, a *sql.Tx for SQLite), so that the event and its check
// commit together.
//
// A nil tx is refused (ErrNilTx): a transaction the application forgot to
// begin would otherwise commit the job at once, whatever became of the
// application's own writes.
func (c *Client) ScheduleTx(ctx context.Context, tx any, p ScheduleParams) (*Job, error) {
	return c.scheduleOne(ctx, tx, true, p)
}

func (c *Client) scheduleOne(ctx context.Context, tx any, inTx bool, p ScheduleParams) (*Job, error) {
	res, err := c.scheduleMany(ctx, tx, inTx, []ScheduleParams{p})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// ScheduleMany upserts many jobs in one statement and one transaction, and
// returns the pending rows in the order given. Nothing is scheduled if any
// params are invalid. A job given more than once is scheduled by each of
// its params in turn (under replace the last one's time and payload stand);
// each of its rows shows the job as the call left it, and only the row that
// created it, if one did, has Inserted set.
func (c *Client) ScheduleMany(ctx context.Context, ps []ScheduleParams) ([]*Job, error) {
	return c.scheduleMany(ctx, nil, false, ps)
}

// ScheduleManyTx is ScheduleMany inside the caller's transaction, which
// must not be nil (see ScheduleTx).
func (c *Client) ScheduleManyTx(ctx context.Context, tx any, ps []ScheduleParams) ([]*Job, error) {
	return c.scheduleMany(ctx, tx, true, ps)
}

// scheduleMany is ScheduleMany in tx, or (tx nil and not inTx) in a
// transaction of its own.
func (c *Client) scheduleMany(ctx context.Context, tx any, inTx bool, ps []ScheduleParams) ([]*Job, error) {
	if len(ps) == 0 {
		if inTx && tx == nil {
			return nil, ErrNilTx
		}
		return nil, nil
	}
	now := c.now()
	params := make([]*driver.JobScheduleParams, len(ps))
	for i, p := range ps {
		jp, err := c.scheduleParams(p, now)
		if err != nil {
			if len(ps) > 1 {
				return nil, fmt.Errorf("prescient: schedule #%d: %w", i, err)
			}
			return nil, fmt.Errorf("prescient: schedule: %w", err)
		}
		params[i] = jp
	}
	if inTx && tx == nil {
		return nil, ErrNilTx
	}
	res, err := c.drv.JobSchedule(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("prescient: schedule: %w", err)
	}
	jobs := make([]*Job, len(res))
	for i, r := range res {
		jobs[i] = readJob(r.Job) // a job kept on conflict may be a legacy row
		jobs[i].Inserted = r.Inserted
	}
	asLeft(jobs)
	return jobs, nil
}

// asLeft makes every row of a job given more than once to one call show the
// job as the call left it. The store applies the rows in order, each
// returning the job as it left it, so an earlier row of the job is out of
// date: it takes the job's last row, keeping its own Inserted (whether
// that row created the job).
func asLeft(jobs []*Job) {
	// A job's second row is never the one that created it: a call whose
	// rows all did (a bulk schedule of new jobs) names each job once.
	if len(jobs) < 2 || !slices.ContainsFunc(jobs, func(j *Job) bool { return !j.Inserted }) {
		return
	}
	last := make(map[int64]*Job, len(jobs))
	for _, j := range jobs {
		last[j.ID] = j
	}
	if len(last) == len(jobs) {
		return
	}
	for i, j := range jobs {
		if l := last[j.ID]; l != j {
			cp := *l
			cp.Inserted = j.Inserted
			jobs[i] = &cp
		}
	}
}

// SlotFor returns the slot a check asked for at `at` lands in when scheduled
// at `now`: at rounded up to the grid, or the first slot after now when that
// is not after now (a slot that has begun may already have been fired).
func (c *Client) SlotFor(at, now time.Time) time.Time {
	slot := c.cfg.Grid.Ceil(at)
	if !slot.After(now) {
		slot = c.cfg.Grid.Next(now)
	}
	return slot
}

// slotInRange is SlotFor for a time given by the application, refused when
// it, or the slot it rounds up to, lies outside the supported range: a store
// would keep it, but the engine's Duration arithmetic and JSON cannot.
func (c *Client) slotInRange(at, now time.Time) (time.Time, error) {
	if err := slots.CheckTime(at); err != nil {
		return time.Time{}, err
	}
	slot := c.SlotFor(at, now)
	if !slots.InRange(slot) {
		return time.Time{}, fmt.Errorf("time %s rounds up to the slot %s, %w %s",
			at.Format(time.RFC3339Nano), slot.Format(time.RFC3339Nano), slots.ErrOutOfRange, slots.Range())
	}
	return slot, nil
}

// wrongEntity refuses a job of entity for a check registered for another
// entity: it could only fail (ErrWrongEntity).
func (c *Client) wrongEntity(entity, key, check string) error {
	if ch, ok := c.cfg.Checks.Lookup(check); ok && ch.Opts.Entity != "" && ch.Opts.Entity != entity {
		return fmt.Errorf("%s/%s/%s: %w: check %s watches entity %s only, and could only fail a job of entity %s",
			entity, key, check, ErrWrongEntity, check, ch.Opts.Entity, entity)
	}
	return nil
}

func (c *Client) scheduleParams(p ScheduleParams, now time.Time) (*driver.JobScheduleParams, error) {
	if err := validateIdentity(p.Entity, p.Key); err != nil {
		return nil, err
	}
	if err := checks.ValidateName("check", p.Check); err != nil {
		return nil, err
	}
	if err := c.wrongEntity(p.Entity, p.Key, p.Check); err != nil {
		return nil, err
	}
	if p.At.IsZero() {
		return nil, fmt.Errorf("%s/%s/%s: the time to check at is required", p.Entity, p.Key, p.Check)
	}
	switch p.OnConflict {
	case "":
		p.OnConflict = ConflictReplace
	case ConflictReplace, ConflictKeep:
	default:
		return nil, fmt.Errorf("unknown conflict rule %q (want %q or %q)", p.OnConflict, ConflictReplace, ConflictKeep)
	}
	slot, err := c.slotInRange(p.At, now)
	if err != nil {
		return nil, fmt.Errorf("%s/%s/%s: %w", p.Entity, p.Key, p.Check, err)
	}
	payload, err := marshalPayload(p.Payload)
	if err != nil {
		return nil, fmt.Errorf("%s/%s/%s: %w", p.Entity, p.Key, p.Check, err)
	}
	return &driver.JobScheduleParams{
		Entity:     p.Entity,
		Key:        p.Key,
		Check:      p.Check,
		At:         slot,
		Payload:    payload,
		OnConflict: p.OnConflict,
		Now:        now,
	}, nil
}

func validateIdentity(entity, key string) error {
	if err := checks.ValidateName("entity", entity); err != nil {
		return err
	}
	return checks.ValidateKey(entity, key)
}

func marshalPayload(v any) (json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	var b []byte
	switch v := v.(type) {
	case json.RawMessage:
		if v == nil {
			return nil, nil // a job's Payload when it has none: none (an empty non-nil one is no JSON)
		}
		b = v
	case []byte:
		// JSON already, as json.Marshal returns it: marshalled again it
		// would be a base64 string, which no check reads as what it was.
		if v == nil {
			return nil, nil
		}
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("payload: %w", err)
		}
	}
	if err := checks.ValidatePayload(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Reschedule moves an existing job's next check to at (rounded, and refused
// outside the supported range, as in Schedule). It returns ErrNotFound when
// the job is not pending.
func (c *Client) Reschedule(ctx context.Context, entity, key, check string, at time.Time) (*Job, error) {
	return c.reschedule(ctx, nil, false, entity, key, check, at)
}

// RescheduleTx is Reschedule inside the caller's transaction, which must
// not be nil (see ScheduleTx).
func (c *Client) RescheduleTx(ctx context.Context, tx any, entity, key, check string, at time.Time) (*Job, error) {
	return c.reschedule(ctx, tx, true, entity, key, check, at)
}

func (c *Client) reschedule(ctx context.Context, tx any, inTx bool, entity, key, check string, at time.Time) (*Job, error) {
	if err := validateIdentity(entity, key); err != nil {
		return nil, fmt.Errorf("prescient: reschedule: %w", err)
	}
	if err := checks.ValidateName("check", check); err != nil {
		return nil, fmt.Errorf("prescient: reschedule: %w", err)
	}
	if at.IsZero() {
		return nil, fmt.Errorf("prescient: reschedule %s/%s/%s: the time to check at is required", entity, key, check)
	}
	now := c.now()
	slot, err := c.slotInRange(at, now)
	if err != nil {
		return nil, fmt.Errorf("prescient: reschedule %s/%s/%s: %w", entity, key, check, err)
	}
	if inTx && tx == nil {
		return nil, ErrNilTx
	}
	job, err := c.drv.JobReschedule(ctx, tx, &driver.JobRescheduleParams{
		Entity: entity, Key: key, Check: check, At: slot, Now: now,
	})
	if err != nil {
		return nil, fmt.Errorf("prescient: %w", err) // the driver names the job
	}
	return readJob(job), nil
}

// Cancel moves the pending job (entity, key, check) to history as cancelled,
// or every pending job of the entity when check is empty. It returns how many
// jobs it cancelled; cancelling what does not exist is not an error.
func (c *Client) Cancel(ctx context.Context, entity, key, check string) (int, error) {
	return c.cancel(ctx, nil, false, entity, key, check)
}

// CancelTx is Cancel inside the caller's transaction, which must not be nil
// (see ScheduleTx).
func (c *Client) CancelTx(ctx context.Context, tx any, entity, key, check string) (int, error) {
	return c.cancel(ctx, tx, true, entity, key, check)
}

func (c *Client) cancel(ctx context.Context, tx any, inTx bool, entity, key, check string) (int, error) {
	if err := validateIdentity(entity, key); err != nil {
		return 0, fmt.Errorf("prescient: cancel: %w", err)
	}
	if check != "" {
		if err := checks.ValidateName("check", check); err != nil {
			return 0, fmt.Errorf("prescient: cancel: %w", err)
		}
	}
	if inTx && tx == nil {
		return 0, ErrNilTx
	}
	n, err := c.drv.JobCancel(ctx, tx, &driver.JobCancelParams{Entity: entity, Key: key, Check: check, Now: c.now(), By: c.cfg.FinishedBy})
	if err != nil {
		return 0, fmt.Errorf("prescient: %w", err) // the driver names the jobs
	}
	return n, nil
}

// RetireOpts tunes RetireCheck. The zero value retires the check's jobs of
// every entity, RetireBatchDefault per transaction.
type RetireOpts struct {
	// Entity, when set, limits the retirement to the check's jobs of that
	// entity, and leaves the catalog alone.
	Entity string
	// BatchSize is how many jobs a transaction cancels (default
	// RetireBatchDefault).
	BatchSize int
	// Force retires the check even though a live server runs it, or may
	// (one of an older prescient, whose heartbeat does not say).
	Force bool
}

// RetireBatchDefault is RetireOpts.BatchSize's default.
const RetireBatchDefault = 10_000

// RetireCheck retires a check that no server runs any more: it moves every
// pending job of the check to history as cancelled, finished by "retire",
// in transactions of opts.BatchSize jobs, and then (unless opts.Entity is
// set) removes the check from the catalog, so that Resolve no longer looks
// for it and status readers no longer list it. opts may be nil. It returns
// how many jobs it cancelled (those of the transactions that committed,
// when it fails or ctx ends midway) and whether it removed the check's
// catalog entry. A check this client runs is refused, and so, unless
// opts.Force, is one a live server runs by its latest heartbeat
// (Server.Checks), or may run (a server of an older prescient, which does
// not say): take it out of every server first, or they would go on running
// jobs the application schedules for it, and Resolve, reading the catalog,
// would no longer settle them.
func (c *Client) RetireCheck(ctx context.Context, check string, opts *RetireOpts) (cancelled int, removed bool, err error) {
	o := RetireOpts{BatchSize: RetireBatchDefault}
	if opts != nil {
		o.Entity, o.Force = opts.Entity, opts.Force
		if opts.BatchSize != 0 {
			o.BatchSize = opts.BatchSize
		}
	}
	if err := checks.ValidateName("check", check); err != nil {
		return 0, false, fmt.Errorf("prescient: retire: %w", err)
	}
	if o.Entity != "" {
		if err := checks.ValidateName("entity", o.Entity); err != nil {
			return 0, false, fmt.Errorf("prescient: retire: %w", err)
		}
	}
	if o.BatchSize < 0 {
		return 0, false, fmt.Errorf("prescient: retire: batch size %d must be positive", o.BatchSize)
	}
	if _, ok := c.cfg.Checks.Lookup(check); ok {
		return 0, false, fmt.Errorf("prescient: retire: check %s is registered with this client (Config.Checks): "+
			"remove it from every server first", check)
	}
	if !o.Force {
		if err := c.refuseRunning(ctx, check); err != nil {
			return 0, false, fmt.Errorf("prescient: retire: %w", err)
		}
	}
	// Batch after batch in identity order, each starting after the last
	// job of the one before, so that the pending table is read once, not
	// once a batch. Jobs the application schedules meanwhile may sort
	// before the batch under way: a pass that took more than one batch is
	// followed by another from the first job, until one statement finds
	// the rest of the check's jobs from the first.
	for after := (driver.JobRef{}); ; {
		r, err := c.drv.JobCancelCheck(ctx, &driver.JobCancelCheckParams{Check: check, Entity: o.Entity,
			After: after, Limit: o.BatchSize, Now: c.now(), By: "retire"})
		if err != nil {
			return cancelled, false, fmt.Errorf("prescient: retire: %w (%d job(s) cancelled before)", err, cancelled)
		}
		cancelled += r.Cancelled
		if r.Cancelled == o.BatchSize {
			after = r.Last
			continue
		}
		if after == (driver.JobRef{}) {
			break
		}
		after = driver.JobRef{}
	}
	if o.Entity != "" {
		return cancelled, false, nil
	}
	removed, err = c.drv.CatalogDelete(ctx, check)
	if err != nil {
		return cancelled, false, fmt.Errorf("prescient: retire: %w (%d job(s) cancelled)", err, cancelled)
	}
	return cancelled, removed, nil
}

// refuseRunning returns an error when a live server runs check, by its
// latest heartbeat, or does not say which checks it runs.
func (c *Client) refuseRunning(ctx context.Context, check string) error {
	servers, err := c.drv.ServerList(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	var runs, unknown []string
	for _, s := range servers {
		switch {
		case !s.Live(now, c.cfg.ServerTimeout):
		case s.Checks == nil:
			unknown = append(unknown, s.Name)
		case slices.Contains(s.Checks, check):
			runs = append(runs, s.Name)
		}
	}
	switch {
	case len(runs) > 0:
		return fmt.Errorf("check %s is run by live server(s) %s: take it out of them first "+
			"(RetireOpts.Force, --force on the command line, retires its jobs anyway, and they go on running it)",
			check, strings.Join(runs, ", "))
	case len(unknown) > 0:
		return fmt.Errorf("live server(s) %s do not say which checks they run (an older prescient): "+
			"upgrade or stop them first, or force it (RetireOpts.Force, --force) if none runs check %s", strings.Join(unknown, ", "), check)
	}
	return nil
}

// Resolve says that event happened to the entity: every pending job of the
// entity whose check awaits event (checks.Opts.Awaits, as recorded in the
// store's catalog by a started client or by SyncCatalog) moves to history as
// resolved. It returns how many; none is not an error.
func (c *Client) Resolve(ctx context.Context, entity, key, event string) (int, error) {
	return c.resolve(ctx, nil, false, entity, key, event)
}

// ResolveTx is Resolve inside the caller's transaction, which must not be
// nil (see ScheduleTx).
func (c *Client) ResolveTx(ctx context.Context, tx any, entity, key, event string) (int, error) {
	return c.resolve(ctx, tx, true, entity, key, event)
}

func (c *Client) resolve(ctx context.Context, tx any, inTx bool, entity, key, event string) (int, error) {
	if err := validateIdentity(entity, key); err != nil {
		return 0, fmt.Errorf("prescient: resolve: %w", err)
	}
	if err := checks.ValidateName("event", event); err != nil {
		return 0, fmt.Errorf("prescient: resolve: %w", err)
	}
	if inTx && tx == nil {
		return 0, ErrNilTx
	}
	n, err := c.drv.JobResolve(ctx, tx, &driver.JobResolveParams{Entity: entity, Key: key, Event: event, Now: c.now(), By: c.cfg.FinishedBy})
	if err != nil {
		return 0, fmt.Errorf("prescient: %w", err) // the driver names the jobs
	}
	return n, nil
}

// Job returns the pending job (entity, key, check), or ErrNotFound. A check
// time an older version stored beyond the supported range reads as
// slots.MaxTime (see slots.Clamp).
func (c *Client) Job(ctx context.Context, entity, key, check string) (*Job, error) {
	// A name no job can have is an error, not "not found": a typo must not
	// read as a job that finished.
	if err := validateIdentity(entity, key); err != nil {
		return nil, fmt.Errorf("prescient: job: %w", err)
	}
	if err := checks.ValidateName("check", check); err != nil {
		return nil, fmt.Errorf("prescient: job: %w", err)
	}
	j, err := c.drv.JobGet(ctx, entity, key, check)
	if err != nil {
		return nil, err
	}
	return readJob(j), nil
}

// History returns history records matching f, newest first. A check time an
// older version stored beyond the supported range reads as slots.MaxTime
// (see slots.Clamp).
func (c *Client) History(ctx context.Context, f history.Filter) ([]*history.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	// A name no job can have is an error, not "no records": a typo must
	// not read as an entity without history.
	if f.Entity != "" {
		if err := checks.ValidateName("entity", f.Entity); err != nil {
			return nil, fmt.Errorf("history filter: %w", err)
		}
	}
	if f.Key != "" {
		if err := checks.ValidateKey(f.Entity, f.Key); err != nil {
			return nil, fmt.Errorf("history filter: %w", err)
		}
	}
	if f.Check != "" {
		if err := checks.ValidateName("check", f.Check); err != nil {
			return nil, fmt.Errorf("history filter: %w", err)
		}
	}
	recs, err := c.drv.HistoryList(ctx, f)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		r.FirstCheckAt = slots.Clamp(r.FirstCheckAt)
		r.LastCheckAt = slots.Clamp(r.LastCheckAt)
	}
	return recs, nil
}

// readJob clamps the check times of a job read from the store into the
// supported range, so that one row an older version wrote beyond it cannot
// break a command that prints it (JSON refuses years after 9999).
func readJob(j *Job) *Job {
	if j != nil {
		j.FirstCheckAt = slots.Clamp(j.FirstCheckAt)
		j.NextCheckAt = slots.Clamp(j.NextCheckAt)
		j.LastCheckAt = slots.Clamp(j.LastCheckAt)
	}
	return j
}

// SyncCatalog records the registered checks and the events they await in the
// store, so that Resolve, from this or any process (or SQL), can find them.
// Start calls it; an application that resolves before any server started can
// call it itself.
func (c *Client) SyncCatalog(ctx context.Context) error {
	all := c.cfg.Checks.All()
	entries := make([]driver.CatalogEntry, len(all))
	for i, ch := range all {
		entries[i] = driver.CatalogEntry{Check: ch.Name, Awaits: ch.Opts.Awaits, Entity: ch.Opts.Entity}
	}
	if len(entries) == 0 {
		return nil
	}
	if err := c.drv.CatalogSave(ctx, entries); err != nil {
		return fmt.Errorf("prescient: %w", err) // the driver says "save catalog"
	}
	return nil
}
