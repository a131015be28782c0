package prescient

import (
	"context"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// A boundedDriver bounds the statements of the engine's own protocol on a
// database server (a store whose Features say MultiHost): each gives up
// after limit, ServerTimeout (pgx then asks the server to cancel it, and
// closes the connection when no answer comes within 5 s more). A primary that hangs (a stuck disk, a paused
// VM, a host partitioned away without a reset) keeps its connections open
// and answers nothing; without a bound, a group whose checks had run waited
// for its decisions or its commit until TCP gave up on the connection (from
// about 15 minutes to never), holding the firing of its slot and, on a
// single server, every later slot. With it, the statement fails, pgx closes
// the connection to the host that does not answer, the group fails as on a lost connection (its writes never
// committed, or, for a commit cut off in doubt, committed whole: the engine
// re-applies only to jobs still due, see recover), and the next connection
// may reach a new primary. By then the other servers count this one as gone
// and have taken its slots over, as they would for a server whose heartbeat
// stopped (the heartbeat gives up after half the server timeout).
//
// The checks' own statements are not bounded here: each check's context
// ends with its runtime guard. Neither are the sweep and the pruning of
// history, whose statements may legitimately run long on a large backlog,
// nor the calls an application makes through the Client other than those
// that run the engine (FireSlot, Tick).
//
// A call that takes a pool connection may also wait for one, which a
// running group holds for up to its checks' runtime guard and
// GroupDuration (when the pool is no larger than Workers, which the client
// warns of, or behind a pooler with fewer server connections), so such
// calls are bounded by that much more (waitLimit, with the largest runtime
// guard of the engine's and of any check registered): they wait for a
// connection, not fail. Only the statements of a transaction that holds its
// connection (claim, decisions, commit, rollback) are bounded by limit
// alone. The savepoints' ends are not bounded: PostgreSQL's store sends
// them with the next statement, which is.
type boundedDriver struct {
	driver.Driver
	limit time.Duration
	// runtime and groupDuration are the engine's runtime guard and
	// GroupDuration; checks, the registry whose checks may set a larger
	// runtime guard of their own, at any time.
	runtime, groupDuration time.Duration
	checks                 *checks.Registry
}

// Clock is bounded by limit: a reading that waited longer says little.
func (d *boundedDriver) Clock(ctx context.Context) (time.Time, error) {
	return within(ctx, d.limit, d.Driver.Clock)
}

// waitLimit bounds a call that may wait for a pool connection.
func (d *boundedDriver) waitLimit() time.Duration {
	return d.limit + max(d.runtime, d.checks.MaxRuntime()) + d.groupDuration
}

// within runs f under ctx bounded by limit, and says so in its error when
// the bound, not ctx, ended it.
func within[T any](ctx context.Context, limit time.Duration, f func(context.Context) (T, error)) (T, error) {
	bctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	v, err := f(bctx)
	if err != nil && bctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (no answer from the database within %s: its connection is dropped)", err, limit)
	}
	return v, err
}

func within0(ctx context.Context, limit time.Duration, f func(context.Context) error) error {
	_, err := within(ctx, limit, func(ctx context.Context) (struct{}, error) { return struct{}{}, f(ctx) })
	return err
}

// Begin also bounds how long the transaction may wait for its next
// statement, unless p says: a healthy one waits no longer than a check's
// runtime guard (a check runs between two statements), and no group runs
// for more than its GroupDuration and a check's guard. A server that stops
// (frozen, its host suspended) between two statements, its connections
// left open, then loses its transactions, and the jobs they claimed can be
// swept by the servers that took its positions over; without it they
// stayed locked for as long as it stayed stopped.
func (d *boundedDriver) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	if p == nil {
		p = &driver.BeginParams{IdleTimeout: d.waitLimit()}
	}
	tx, err := within(ctx, d.waitLimit(), func(ctx context.Context) (driver.Tx, error) { return d.Driver.Begin(ctx, p) })
	if err != nil {
		return nil, err
	}
	return &boundedTx{Tx: tx, limit: d.limit}, nil
}

func (d *boundedDriver) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	return within(ctx, d.waitLimit(), func(ctx context.Context) ([]*driver.DueJob, error) { return d.Driver.JobsDue(ctx, p) })
}

func (d *boundedDriver) AttemptStart(ctx context.Context, p *driver.AttemptStartParams) (int64, error) {
	return within(ctx, d.waitLimit(), func(ctx context.Context) (int64, error) { return d.Driver.AttemptStart(ctx, p) })
}

func (d *boundedDriver) AttemptEnd(ctx context.Context, id int64) error {
	return within0(ctx, d.waitLimit(), func(ctx context.Context) error { return d.Driver.AttemptEnd(ctx, id) })
}

func (d *boundedDriver) AttemptsLeft(ctx context.Context) ([]*driver.Attempt, error) {
	return within(ctx, d.waitLimit(), d.Driver.AttemptsLeft)
}

func (d *boundedDriver) SlotStart(ctx context.Context, r *driver.SlotRecord) error {
	return within0(ctx, d.waitLimit(), func(ctx context.Context) error { return d.Driver.SlotStart(ctx, r) })
}

func (d *boundedDriver) SlotList(ctx context.Context, p *driver.SlotListParams) ([]*driver.SlotRecord, error) {
	return within(ctx, d.waitLimit(), func(ctx context.Context) ([]*driver.SlotRecord, error) { return d.Driver.SlotList(ctx, p) })
}

func (d *boundedDriver) CatalogList(ctx context.Context) ([]driver.CatalogEntry, error) {
	return within(ctx, d.waitLimit(), d.Driver.CatalogList)
}

func (d *boundedDriver) SlotFinish(ctx context.Context, r *driver.SlotRecord) error {
	return within0(ctx, d.waitLimit(), func(ctx context.Context) error { return d.Driver.SlotFinish(ctx, r) })
}

// A boundedTx bounds the engine's own statements of a processing
// transaction (see boundedDriver); the checks' statements pass through.
type boundedTx struct {
	driver.Tx
	limit time.Duration
}

func (t *boundedTx) Claim(ctx context.Context, p *driver.ClaimParams) ([]*checks.Job, error) {
	// A claim that waits for locks may take LockWait on top.
	return within(ctx, t.limit+max(p.LockWait, 0), func(ctx context.Context) ([]*checks.Job, error) { return t.Tx.Claim(ctx, p) })
}

func (t *boundedTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	return within0(ctx, t.limit, func(ctx context.Context) error { return t.Tx.Apply(ctx, p) })
}

func (t *boundedTx) Commit(ctx context.Context) error { return within0(ctx, t.limit, t.Tx.Commit) }

func (t *boundedTx) Rollback(ctx context.Context) error { return within0(ctx, t.limit, t.Tx.Rollback) }
