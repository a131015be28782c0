// Package driver is the contract between prescient's engine and a store: the
// interface the postgres and sqlite packages implement, the parameter and row
// types its methods take and return, and the errors they translate theirs
// into. Applications do not need it; they use prescient.Client over a store.
//
// The engine owns the processing protocol (claim due jobs, run their checks
// with each check's writes isolated, decide, apply the decisions, commit,
// recover from a failed commit); a driver only answers its queries. Each
// method is one query, or a few that must run together, plus error
// translation: errors never carry a database library's types (ErrNotFound,
// ErrTxType, ErrNotMigrated and ErrLockTimeout are the sentinels the engine
// tests for). The storetest package holds the conformance suite every driver
// passes.
//
// Times passed in are UTC; times stored as check times are already on the
// slot grid (the client rounds before calling). A driver never reads the
// database's clock where the engine's time matters: "now" always comes in as
// a parameter (Clock reads it for the engine to compare with its own).
package driver

import (
	"context"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// Driver is a store as the engine and the client see it.
//
// Methods that take tx run in the caller's transaction when tx is non-nil (a
// pgx.Tx for PostgreSQL, a *sql.Tx for SQLite; anything else is an error
// wrapping ErrTxType) and in a transaction of their own when tx is nil.
type Driver interface {
	// Migrate brings the schema up to date. It is safe to run repeatedly and
	// from several processes at once.
	Migrate(ctx context.Context) error
	// Close releases the store's connections.
	Close()
	// Features says what the store can do.
	Features() Features
	// Clock reads the database server's clock, for a store whose database
	// runs on a host of its own (PostgreSQL), and returns the latest it can
	// be as Clock returns: the reading plus the time its statement took, a
	// wait for a connection left out. A store that shares the client's host
	// (SQLite) returns the zero time.
	Clock(ctx context.Context) (time.Time, error)

	// Begin starts a processing transaction (see Tx). It may wait for a
	// connection, or for the store's write lock, for as long as ctx lasts.
	// p may be nil.
	Begin(ctx context.Context, p *BeginParams) (Tx, error)

	// GridSave records the slot grid in the database, so that the SQL
	// functions round exactly as the engine does.
	GridSave(ctx context.Context, g slots.Grid) error
	// CatalogSave records, for each check, the events it awaits. Resolve
	// settles pending jobs by reading this catalog, so the application never
	// has to know which checks it scheduled. Entries replace earlier entries of
	// the same name; other names are left alone.
	CatalogSave(ctx context.Context, entries []CatalogEntry) error
	// CatalogDelete removes the check's catalog entry and reports whether
	// there was one.
	CatalogDelete(ctx context.Context, check string) (bool, error)

	// JobSchedule upserts jobs on (entity, key, check) following each
	// params' OnConflict rule, and returns the resulting rows in params order.
	JobSchedule(ctx context.Context, tx any, params []*JobScheduleParams) ([]*JobScheduleResult, error)
	// JobReschedule moves an existing job's next check. It returns ErrNotFound
	// when there is no such job.
	JobReschedule(ctx context.Context, tx any, p *JobRescheduleParams) (*Job, error)
	// JobCancel moves the matching pending jobs to history as cancelled and
	// returns how many there were (0 is not an error).
	JobCancel(ctx context.Context, tx any, p *JobCancelParams) (int, error)
	// JobCancelCheck moves at most p.Limit pending jobs of check p.Check
	// (of entity p.Entity only, when set), the first after p.After in
	// (entity, entity_key) order, to history as cancelled, in one
	// transaction of its own, and returns how many and the last: fewer
	// than p.Limit when none is left after it. Each call reads the jobs
	// from p.After on, not from the first, so that cancelling a check's
	// jobs batch by batch reads the table once. A job being processed is
	// waited for, as by JobCancel.
	JobCancelCheck(ctx context.Context, p *JobCancelCheckParams) (*JobCancelCheckResult, error)
	// JobResolve moves to history as resolved every pending job of the entity
	// whose check awaits the event (per the catalog), and returns how many.
	JobResolve(ctx context.Context, tx any, p *JobResolveParams) (int, error)
	// JobGet returns one pending job, or ErrNotFound.
	JobGet(ctx context.Context, entity, key, check string) (*Job, error)
	// JobList lists pending jobs matching p, soonest first (see
	// JobListParams), walking the (next_check_at, id) index, or the
	// (entity, key, check) one when p names an entity.
	JobList(ctx context.Context, p *JobListParams) ([]*Job, error)
	// JobEntities returns the distinct entity names of pending jobs that
	// sort after `after` (all of them when it is empty), in the order of the
	// (entity, entity_key, check_name) index, at most limit (which must be
	// positive). It skips from one entity to the next on that index (a
	// loose index scan), so its cost follows the names it returns, never the
	// number of pending jobs; page on by passing the last name returned.
	// Shell completion reads entity names with it.
	JobEntities(ctx context.Context, after string, limit int) ([]string, error)

	// JobsDue lists pending jobs with next_check_at exactly p.Slot and
	// id > p.AfterID, ascending by id, at most p.Limit. Its cost is
	// proportional to the jobs due in the slot, not to the table, whatever
	// the table held when the store first ran it.
	JobsDue(ctx context.Context, p *JobsDueParams) ([]*DueJob, error)
	// AttemptStart records, in a transaction of its own that has committed
	// when it returns, that p.Server is about to run the checks of the jobs
	// p.IDs due in p.Slot, and returns the attempt's id. The processing
	// transaction that runs them ends the attempt (ApplyParams.Attempt) when
	// it commits. An attempt left behind says its checks started and never
	// finished: their server died, or lost the database, while they ran.
	AttemptStart(ctx context.Context, p *AttemptStartParams) (int64, error)
	// AttemptEnd deletes an attempt whose transaction the engine rolled back
	// on purpose (shutdown); a missing one is not an error.
	AttemptEnd(ctx context.Context, id int64) error
	// AttemptNarrow makes attempt id name only ids, in a transaction of its
	// own that has committed when it returns: the engine narrows the attempt
	// of a processing transaction whose claim skipped some of its jobs, with
	// that transaction still open, before any check runs. The engine calls
	// it only on stores whose Features say NarrowAttempts, and rolls back
	// and claims again when it fails.
	AttemptNarrow(ctx context.Context, id int64, ids []int64) error
	// AttemptsLeft returns the attempts recorded and not yet ended, oldest
	// first: those of transactions still running, and those left behind.
	AttemptsLeft(ctx context.Context) ([]*Attempt, error)

	// JobsOverdueSlots lists the distinct slots s with after < s < before
	// that still have pending jobs, oldest first, at most limit. A zero after
	// is no lower bound; passing the last slot returned pages on.
	JobsOverdueSlots(ctx context.Context, after, before time.Time, limit int) ([]time.Time, error)
	// JobsReslot moves every pending job with next_check_at before p.Before,
	// and not in one of p.Except, to p.To (a slot), skipping rows held by a
	// processing transaction, and returns how many.
	JobsReslot(ctx context.Context, p *JobsReslotParams) (int, error)
	// JobStats summarises the pending table for status: totals, overdue jobs,
	// the load of upcoming slots and the pending count per check name.
	JobStats(ctx context.Context, p *JobStatsParams) (*JobStats, error)

	// SlotStart records that a server started firing a slot: an upsert on
	// slot and server that clears any earlier finish, and keeps the start,
	// counts and Took of a row already there (r's Took is not used: a new
	// row has none yet).
	SlotStart(ctx context.Context, r *SlotRecord) error
	// SlotFinish records the end of one firing of a slot: it adds r's
	// counts and Took (what this firing did) to the row's, atomically, so
	// that two firings of a slot under one server name (a server and a
	// `prescient sweep` beside it) both count; Unknown is r's (the jobs
	// the latest firing left pending), MaxLateness the larger. With
	// r.FinishedAt zero it leaves the slot incomplete: a firing cut short
	// (shutdown, a store error) still says what it did.
	SlotFinish(ctx context.Context, r *SlotRecord) error
	// SlotList returns ledger rows, newest slot first.
	SlotList(ctx context.Context, p *SlotListParams) ([]*SlotRecord, error)

	// HistoryList returns history records matching f, newest first.
	HistoryList(ctx context.Context, f history.Filter) ([]*history.Record, error)
	// HistoryLatest returns the history record of the job (entity, key,
	// check) with the highest id: its latest end, whatever the clocks that
	// wrote the finish times (a job scheduled anew after an end gets a
	// higher id). ErrNotFound when there is none.
	HistoryLatest(ctx context.Context, entity, key, check string) (*history.Record, error)
	// HistoryCounts counts history records per outcome finished at or after since.
	HistoryCounts(ctx context.Context, since time.Time) (map[history.Outcome]int, error)
	// HistoryPrune deletes history records finished before `before`, ledger
	// rows of slots before it, events recorded before it that no sink
	// still has to deliver (with their deliveries), in bounded batches, and
	// the servers whose last heartbeat is before it, and returns how many
	// history records went.
	HistoryPrune(ctx context.Context, before time.Time) (int, error)

	// DeliveriesClaim claims up to p.Limit deliveries of sink p.Sink that
	// are pending and due at p.Now, soonest first, in a transaction of its
	// own: each gets one more attempt, p.Server as its lease's owner, and
	// p.LeaseUntil as its NextAttemptAt, so that no other claim takes it
	// before the lease ends (deliveries another transaction is claiming are
	// skipped, never waited for). It returns them with their events.
	DeliveriesClaim(ctx context.Context, p *DeliveriesClaimParams) ([]*Delivery, error)
	// DeliveryFinish records the result of an attempt, if the delivery is
	// still pending with p.Attempt attempts (see DeliveryFinishParams), and
	// reports whether it was.
	DeliveryFinish(ctx context.Context, p *DeliveryFinishParams) (bool, error)
	// DeliveryList lists deliveries with their events, newest event first
	// (then by sink).
	DeliveryList(ctx context.Context, p *DeliveryListParams) ([]*Delivery, error)
	// DeliveryCounts counts deliveries per sink: pending and dead ones, and
	// those delivered at or after since. A sink with none is left out.
	DeliveryCounts(ctx context.Context, since time.Time) (map[string]*DeliveryCount, error)
	// DeliveriesRetry queues dead deliveries again (see
	// DeliveriesRetryParams): pending, with no attempts, due at p.Now, their
	// last status and error kept until the next attempt. It returns how
	// many.
	DeliveriesRetry(ctx context.Context, p *DeliveriesRetryParams) (int, error)

	// ServerHeartbeat upserts a server's registration, every field of s.
	ServerHeartbeat(ctx context.Context, s *Server) error
	// ServerList returns the registered servers, sorted by name, each
	// with the Firing, Timeout and Checks its latest heartbeat wrote (empty,
	// zero and nil where an older prescient's heartbeat came since).
	ServerList(ctx context.Context) ([]*Server, error)
	// ServerDelete removes the registration of the server name started at
	// startedAt (its Server.StartedAt, to the microsecond); a missing one is
	// not an error, nor is one that a later process of the same name
	// registered, which it keeps.
	ServerDelete(ctx context.Context, name string, startedAt time.Time) error

	// The methods below move a store's contents to another store (`prescient
	// copy`). Exports read pages in id order outside any transaction: a copy
	// is consistent only while no server or client writes to the source.

	// GridGet returns the slot grid last saved by GridSave (Resolution and
	// Offset; Cycle is not stored and is zero), or ErrNotFound when none was
	// saved.
	GridGet(ctx context.Context) (slots.Grid, error)
	// CatalogList returns every catalog entry, sorted by check name. An entry
	// whose check awaits no event has an empty Awaits.
	CatalogList(ctx context.Context) ([]CatalogEntry, error)
	// JobsExport returns at most limit pending jobs with id > afterID,
	// ascending by id, with their full state. Page through the table by
	// passing the last id returned as the next afterID; a page shorter than
	// limit is the last. limit must be positive.
	JobsExport(ctx context.Context, afterID int64, limit int) ([]*Job, error)
	// JobsImport inserts jobs into the pending table exactly as given, in
	// the caller's transaction or its own: the id and every other field
	// (first, next and last check, counts, last error, runtime, lateness,
	// payload, created and updated times) are kept, so that a job's history
	// record keeps the id it had in the source.
	//
	// Keeping ids is safe only because collisions are refused: a job whose
	// (entity, key, check) is already pending, whose id is already used by a
	// pending job or a history record, or that appears twice in jobs, is an
	// error naming it, and nothing of the call is written (CheckJobsImport
	// finds what needs no database). Ids must be positive. The store's id
	// sequence is moved past the largest imported id, so that jobs scheduled
	// later never take one of them; that move is not undone if the
	// transaction rolls back (it leaves a gap, no harm).
	JobsImport(ctx context.Context, tx any, jobs []*Job) error
	// HistoryExport returns at most limit history records with id > afterID,
	// ascending by id, with every field. Paging is as in JobsExport.
	HistoryExport(ctx context.Context, afterID int64, limit int) ([]*history.Record, error)
	// HistoryImport inserts history records exactly as given, ids included,
	// in the caller's transaction or its own. A record whose id is already
	// used by a history record or a pending job, that appears twice in recs
	// or whose outcome is unknown is an error naming it, and nothing of the
	// call is written. History ids are pending jobs' ids, so the store's job
	// id sequence is moved past the largest imported id, as in JobsImport.
	HistoryImport(ctx context.Context, tx any, recs []*history.Record) error
	// OutboxExport returns at most limit recorded events with id > afterID,
	// ascending by id, each with its deliveries (by sink) in their state.
	// Paging is as in JobsExport. The events are what keeps a stage from
	// being raised twice (their idempotency keys), so a copy of the jobs
	// without them would raise every stage again.
	OutboxExport(ctx context.Context, afterID int64, limit int) ([]*OutboxEntry, error)
	// OutboxImport inserts events and their deliveries exactly as given,
	// ids included, in the caller's transaction or its own, except that a
	// delivery's lease is not kept (its LeaseOwner: an attempt under way in
	// the source is not under way here; it is due at the lease's end). An
	// event whose id or idempotency key is already recorded, or that
	// appears twice in entries, is an error naming it, and nothing of the
	// call is written. The event id sequence is moved past the largest
	// imported id.
	OutboxImport(ctx context.Context, tx any, entries []*OutboxEntry) error
}

// TxUnwrapper is implemented by a store whose caller transactions are of
// type TTx (pgx.Tx for PostgreSQL, *sql.Tx for SQLite). UnwrapTx returns tx
// as the Driver's tx parameters take it. It lets prescient.TypedClient have
// the compiler check the transactions an application passes in.
type TxUnwrapper[TTx any] interface {
	UnwrapTx(tx TTx) any
}

// Features says what a store can do.
type Features struct {
	// MultiHost reports that servers on several hosts may share the store
	// (automatic ownership needs it).
	MultiHost bool
	// MaxGroupSize caps how many checks one processing transaction may run,
	// each in a savepoint of its own; 0 means no cap. PostgreSQL caps it at 64,
	// the subtransactions a backend caches: a transaction with more
	// subtransactions that wrote overflows the cache and slows every
	// snapshot on the server until it ends.
	MaxGroupSize int
	// NarrowAttempts reports that AttemptNarrow can commit while a
	// processing transaction is open (not on SQLite, whose one writer that
	// transaction holds): a claim that comes up short then narrows its
	// attempt and goes on, instead of rolling back and claiming again.
	NarrowAttempts bool
	// Conns is how many connections the store holds at most (its pool's
	// cap), 0 when it has no such cap. Each running group of checks holds
	// one for its transaction: with fewer than Workers, fewer groups run at
	// once than configured; with Workers, none is left to narrow an attempt
	// beside a group. The client warns at Start in both cases.
	Conns int
}

// Tx is a processing transaction: the engine claims due jobs in it, runs
// their checks through it, applies their decisions and commits. Its methods
// are not safe for concurrent use; the engine serialises the checks' calls.
//
// Each check's writes are isolated: the engine calls Savepoint before a
// check (or a batch check's call) runs, then Release to keep its writes or
// RollbackTo to undo them. A driver may defer these and send them with the
// next statement, and may leave out a savepoint that encloses no statement:
// an error they meet then surfaces from that later call, and Err reports it.
type Tx interface {
	// Claim locks the jobs among p.IDs whose next_check_at is still p.Slot
	// and that no other transaction holds, and returns them in id order with
	// Slot set (the engine sets Now and Tx). A job held elsewhere is skipped,
	// never waited for, unless p.LockWait is positive: then Claim waits up
	// to LockWait for all of them, and returns an error wrapping
	// ErrLockTimeout if they are still held.
	Claim(ctx context.Context, p *ClaimParams) ([]*checks.Job, error)

	// Savepoint starts isolating a check's writes; Release keeps them and
	// RollbackTo undoes them. Savepoints do not nest: each Savepoint is ended
	// by one Release or RollbackTo before the next.
	Savepoint(ctx context.Context) error
	Release(ctx context.Context) error
	RollbackTo(ctx context.Context) error

	// Exec, Query and QueryRow run a check's statement in the transaction.
	// While the Rows of Query (or a Row not yet scanned) are open, the
	// transaction is busy; the engine closes them before the check's
	// savepoint ends. QueryRow's Scan reports ErrNotFound when there was no
	// row.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Raw returns the database library's transaction, for checks.Tx.Driver,
	// with any deferred savepoint sent first. A check that uses it directly
	// must not commit or roll it back.
	Raw() any

	// Aborted reports that a statement failed and left the current savepoint
	// aborted (PostgreSQL then refuses every later statement until
	// RollbackTo): a check that returned no error after that failed.
	Aborted() bool
	// Err reports that the transaction can no longer commit at all (its
	// connection was lost, SQLite rolled it back): every check's writes in it
	// are gone.
	Err() error

	// OutboxRecord records an event raised by a check, with one pending
	// delivery per sink of p.Sinks, in the transaction and the check's
	// savepoint: it commits with the check's other writes, or not at all.
	// An event whose idempotency key was recorded before (by this
	// transaction or one committed) is not recorded again, and
	// OutboxRecord reports false.
	OutboxRecord(ctx context.Context, p *OutboxRecordParams) (bool, error)

	// Apply applies the decisions, all in the transaction, in one statement
	// where the store allows. It refuses params that fail Validate and
	// applies nothing then.
	Apply(ctx context.Context, p *ApplyParams) error
	// Commit commits; Rollback rolls back (a no-op after Commit). Both end
	// the transaction and release what Begin took.
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Rows iterates a check's query result.
type Rows = checks.Rows

// Row is one result row of a check's QueryRow. Close releases it unscanned;
// the engine closes every row when the check ends.
type Row interface {
	checks.Row
	Close()
}
