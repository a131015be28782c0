package prescient

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// Store is everything the engine and the client need from storage, in the
// domain's terms. The postgres and sqlite packages implement it; the storetest
// package holds the conformance suite both must pass.
//
// Times passed in are UTC; times that are stored as check times are already
// on the slot grid (the client rounds before calling). Implementations never
// call the database's own clock where the engine's time matters: "now" always
// comes in as a parameter.
//
// Methods that take tx run in the caller's transaction when tx is non-nil (a
// pgx.Tx for PostgreSQL, a *sql.Tx for SQLite; anything else is ErrTxType) and
// in a transaction of their own when tx is nil.
type Store interface {
	// Migrate brings the schema up to date. It is safe to run repeatedly and
	// from several processes at once.
	Migrate(ctx context.Context) error
	// Close releases the store's connections.
	Close()

	// GridSave records the slot grid in the database, so that the SQL
	// functions round exactly as the engine does.
	GridSave(ctx context.Context, g slots.Grid) error
	// CatalogSave records, for each check, the events it awaits. Resolve
	// settles pending jobs by reading this catalog, so the application never
	// has to know which checks it scheduled. Entries replace earlier entries of
	// the same name; other names are left alone.
	CatalogSave(ctx context.Context, entries []CatalogEntry) error

	// JobSchedule upserts jobs on (entity, key, check) following each
	// params' OnConflict rule, and returns the resulting rows in params order.
	JobSchedule(ctx context.Context, tx any, params []*JobScheduleParams) ([]*JobScheduleResult, error)
	// JobReschedule moves an existing job's next check. It returns ErrNotFound
	// when there is no such job.
	JobReschedule(ctx context.Context, tx any, p *JobRescheduleParams) (*Job, error)
	// JobCancel moves the matching pending jobs to history as cancelled and
	// returns how many there were (0 is not an error).
	JobCancel(ctx context.Context, tx any, p *JobCancelParams) (int, error)
	// JobResolve moves to history as resolved every pending job of the entity
	// whose check awaits the event (per the catalog), and returns how many.
	JobResolve(ctx context.Context, tx any, p *JobResolveParams) (int, error)
	// JobGet returns one pending job, or ErrNotFound.
	JobGet(ctx context.Context, entity, key, check string) (*Job, error)

	// JobsDue lists pending jobs with next_check_at exactly p.Slot and
	// id > p.AfterID, ascending by id, at most p.Limit. Its cost is
	// proportional to the jobs due in the slot, not to the table.
	JobsDue(ctx context.Context, p *JobsDueParams) ([]*DueJob, error)
	// JobsOverdueSlots lists the distinct slots s with after < s < before
	// that still have pending jobs, oldest first, at most limit. A zero after
	// is no lower bound; passing the last slot returned pages on.
	JobsOverdueSlots(ctx context.Context, after, before time.Time, limit int) ([]time.Time, error)
	// JobsProcess claims the jobs among p.IDs whose next_check_at is still
	// p.Slot and that no other transaction holds, hands them to fn inside one
	// transaction, applies fn's decisions and commits. A job held elsewhere is
	// skipped, never waited for: at most one server processes a job at a time.
	//
	// fn's writes through its checks.Tx are kept only if fn's result does not
	// ask to discard them; the decisions are applied either way. If the
	// transaction died under fn (a cancelled query, a lost connection), the
	// writes are lost: when fn meant to keep them the store applies nothing
	// and returns an error (the jobs stay due and run again: an effect is
	// never recorded without its write); when fn discarded them the store
	// applies the decisions in a fresh transaction, re-claiming the rows.
	// It returns the number of jobs claimed.
	JobsProcess(ctx context.Context, p *JobsProcessParams, fn ProcessFunc) (int, error)
	// JobsReslot moves every pending job with next_check_at before p.Before to
	// p.To (a slot), skipping rows held by a processor, and returns how many.
	JobsReslot(ctx context.Context, p *JobsReslotParams) (int, error)
	// JobStats summarises the pending table for status: totals, overdue jobs,
	// the load of upcoming slots and the pending count per check name.
	JobStats(ctx context.Context, p *JobStatsParams) (*JobStats, error)

	// SlotStart records that a server started firing a slot (an upsert on
	// slot and server that clears any earlier finish).
	SlotStart(ctx context.Context, r *SlotRecord) error
	// SlotFinish records the end of a slot with its counts. With
	// r.FinishedAt zero it records the counts and leaves the slot incomplete:
	// a firing cut short (shutdown, a store error) still says what it did.
	SlotFinish(ctx context.Context, r *SlotRecord) error
	// SlotList returns ledger rows, newest slot first.
	SlotList(ctx context.Context, p *SlotListParams) ([]*SlotRecord, error)

	// HistoryList returns history records matching f, newest first.
	HistoryList(ctx context.Context, f history.Filter) ([]*history.Record, error)
	// HistoryCounts counts history records per outcome finished at or after since.
	HistoryCounts(ctx context.Context, since time.Time) (map[history.Outcome]int, error)
	// HistoryPrune deletes history records finished before `before`, and ledger
	// rows of slots before it, returning how many history records went.
	HistoryPrune(ctx context.Context, before time.Time) (int, error)

	// ServerHeartbeat upserts a server's registration.
	ServerHeartbeat(ctx context.Context, s *Server) error
	// ServerList returns the registered servers, sorted by name.
	ServerList(ctx context.Context) ([]*Server, error)
	// ServerDelete removes a server's registration; a missing one is not an error.
	ServerDelete(ctx context.Context, name string) error

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
	// error naming it, and nothing of the call is written. Ids must be
	// positive. The store's id sequence is moved past the largest imported
	// id, so that jobs scheduled later never take one of them; that move is
	// not undone if the transaction rolls back (it leaves a gap, no harm).
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
}

// CatalogEntry says which events settle a check.
type CatalogEntry struct {
	Check  string
	Awaits []string
}

// ConflictRule says what scheduling does when the job (entity, key, check)
// is already pending.
type ConflictRule string

const (
	// ConflictReplace (the default) moves the pending job's next check to the
	// new time, replaces its payload when a new one is given, and clears its
	// failure count. first_check_at, check_count and created_at stay: it is
	// still the same job, rescheduled.
	ConflictReplace ConflictRule = "replace"
	// ConflictKeep leaves the pending job untouched: scheduling becomes
	// idempotent for event handlers that may see the same event twice.
	ConflictKeep ConflictRule = "keep"
)

// JobScheduleParams is one job to upsert. At is already a slot.
type JobScheduleParams struct {
	Entity     string
	Key        string
	Check      string
	At         time.Time
	Payload    json.RawMessage
	OnConflict ConflictRule
	Now        time.Time
}

// JobScheduleResult is the pending row after an upsert, and whether the upsert
// inserted it (false: it existed, and OnConflict decided what happened).
type JobScheduleResult struct {
	Job      *Job
	Inserted bool
}

// JobRescheduleParams moves an existing job's next check to At (a slot).
type JobRescheduleParams struct {
	Entity, Key, Check string
	At                 time.Time
	Now                time.Time
}

// JobCancelParams selects jobs to cancel: one check of an entity, or every
// check of it when Check is empty.
type JobCancelParams struct {
	Entity, Key, Check string
	Now                time.Time
	// By is recorded as the history record's FinishedBy.
	By string
}

// JobResolveParams settles the jobs of an entity awaiting Event.
type JobResolveParams struct {
	Entity, Key, Event string
	Now                time.Time
	By                 string
}

// JobsDueParams pages through the jobs due in one slot.
type JobsDueParams struct {
	Slot    time.Time
	AfterID int64
	Limit   int
}

// DueJob is a due job's identity, enough to group it by check.
type DueJob struct {
	ID    int64
	Check string
}

// JobsProcessParams says which jobs to claim and when they run.
type JobsProcessParams struct {
	IDs  []int64
	Slot time.Time
	// Now is when the checks run: checks.Job.Now, and the time written as
	// updated_at, finished_at and lateness.
	Now time.Time
	// Server is written into history records' FinishedBy.
	Server string
}

// ProcessFunc runs the checks of claimed jobs inside the store's transaction
// and returns one decision per job. It must not keep tx after returning.
type ProcessFunc func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *ProcessResult

// ProcessResult is what to do with claimed jobs.
type ProcessResult struct {
	// Decisions holds one decision per job, in the order of the jobs.
	Decisions []Decision
	// Discard rolls back whatever the checks wrote through the transaction
	// (they failed) before the decisions are applied.
	Discard bool
}

// Check reports a result that cannot be applied to n claimed jobs: none at
// all, a decision count other than n, or an unknown outcome. Stores call it
// before applying anything.
func (r *ProcessResult) Check(n int) error {
	if r == nil {
		return fmt.Errorf("the process function returned no result for %d job(s)", n)
	}
	if len(r.Decisions) != n {
		return fmt.Errorf("the process function returned %d decision(s) for %d job(s)", len(r.Decisions), n)
	}
	for i, d := range r.Decisions {
		if d.Outcome == "" {
			continue
		}
		if _, err := history.ParseOutcome(string(d.Outcome)); err != nil {
			return fmt.Errorf("decision %d: %w", i, err)
		}
	}
	return nil
}

// Decision is the new state of one claimed job. Exactly one of three things
// happens: Outcome set moves the job to history; otherwise Next set keeps it
// pending until Next; neither set leaves the row untouched (released, e.g. for
// a check this server does not know).
type Decision struct {
	// Outcome, when set, moves the job to history with this outcome.
	Outcome history.Outcome
	// Next is the job's new next_check_at (a slot), when it stays pending.
	Next time.Time
	// Checked says the check ran to a result: check_count goes up by one, the
	// failure count is cleared and last_check_at becomes the slot.
	Checked bool
	// Err, when set, records a failure: failure_count goes up by one and
	// last_error becomes Err.
	Err string
	// Reason, when set with an Outcome and no Err, says why the job finished
	// (a guard's verdict); it is recorded as the history record's last_error
	// without counting a failure.
	Reason string
	// Runtime is added to the job's total runtime.
	Runtime time.Duration
}

// Released reports whether the decision leaves the row as it was.
func (d Decision) Released() bool { return d.Outcome == "" && d.Next.IsZero() }

// JobsReslotParams moves overdue jobs to a later slot.
type JobsReslotParams struct {
	Before time.Time
	To     time.Time
	Now    time.Time
}

// JobStatsParams asks for the pending table's summary as of the slot Current.
type JobStatsParams struct {
	// Current is the slot now in progress: jobs due before it are overdue,
	// jobs due at or after it are upcoming.
	Current time.Time
	// Upcoming caps the number of upcoming slots listed.
	Upcoming int
}

// JobStats summarises the pending table.
type JobStats struct {
	Pending       int       `json:"pending"`
	Overdue       int       `json:"overdue"`
	OldestOverdue time.Time `json:"oldest_overdue,omitzero"`
	// Upcoming lists the slots at or after Current that have jobs, soonest first.
	Upcoming []SlotLoad `json:"upcoming"`
	// ByCheck counts pending jobs per check name.
	ByCheck map[string]int `json:"by_check"`
}

// SlotLoad is the number of jobs pending in one slot.
type SlotLoad struct {
	Slot time.Time `json:"slot"`
	Jobs int       `json:"jobs"`
}

// SlotRecord is one row of the slot ledger: one server's firing of one slot.
type SlotRecord struct {
	Slot   time.Time `json:"slot"`
	Server string    `json:"server"`
	// Kind is "fire" for a slot fired at its boundary, "catchup" for a past
	// slot fired late, "sweep" for a sweep in run mode.
	Kind      string    `json:"kind"`
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is zero while the slot is in progress, or if its server died.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Checked counts jobs whose check ran (to a result or a failure).
	Checked int `json:"checked"`
	// Rescheduled counts jobs that stayed pending with a later check.
	Rescheduled int `json:"rescheduled"`
	// Failures counts failed checks (error, panic, timeout).
	Failures int `json:"failures"`
	// Unknown counts the jobs the latest firing left pending because this
	// server has no check of their name (a server that knows it runs them,
	// from the sweep). A slot is complete once fired, unknown jobs or not.
	Unknown int `json:"unknown"`
	// Outcomes counts the jobs that finished, per outcome.
	Outcomes map[history.Outcome]int `json:"outcomes,omitempty"`
	// MaxLateness is the longest delay between the slot and a check's start.
	MaxLateness time.Duration `json:"max_lateness_ns"`
}

// Complete reports whether the slot's firing finished.
func (r *SlotRecord) Complete() bool { return !r.FinishedAt.IsZero() }

// SlotListParams selects ledger rows: slots in [Since, Until) (zero bounds are
// open), newest first, at most Limit (0 means 100).
type SlotListParams struct {
	Since, Until time.Time
	Limit        int
}

// Server is a registered server (automatic ownership and status).
type Server struct {
	Name        string    `json:"name"`
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// Positions are the positions the server fires, as it last reported them.
	Positions []int `json:"positions"`
}

// Job is a pending job as stored.
type Job struct {
	ID           int64           `json:"id"`
	Entity       string          `json:"entity"`
	Key          string          `json:"key"`
	Check        string          `json:"check"`
	FirstCheckAt time.Time       `json:"first_check_at"`
	NextCheckAt  time.Time       `json:"next_check_at"`
	LastCheckAt  time.Time       `json:"last_check_at,omitzero"`
	CheckCount   int             `json:"check_count"`
	FailureCount int             `json:"failure_count"`
	LastError    string          `json:"last_error,omitempty"`
	Runtime      time.Duration   `json:"runtime_ns"`
	Lateness     time.Duration   `json:"lateness_ns"`
	Payload      json.RawMessage `json:"payload,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}
