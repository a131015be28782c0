package driver

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prescient-dev/prescient/history"
)

// Errors a driver translates its own into. The prescient package exports the
// same values under the same names.
var (
	// ErrNotFound is returned when a job that must exist does not.
	ErrNotFound = errors.New("prescient: not found")
	// ErrTxType is returned when a method is given a transaction of a type
	// the store does not use (a *sql.Tx to the PostgreSQL store, say).
	ErrTxType = errors.New("prescient: transaction type does not match the store")
	// ErrSchemaNewer is returned when the database's schema is at a
	// version this binary does not know: a newer prescient migrated it.
	ErrSchemaNewer = errors.New("prescient: the database's schema is newer than this prescient knows: a newer version migrated it; upgrade prescient")
	// ErrNotMigrated is returned when prescient's tables are missing from the
	// database.
	ErrNotMigrated = errors.New("prescient: the database has no prescient tables yet: run `prescient migrate` (or Store.Migrate) first")
	// ErrLockTimeout is returned by Tx.Claim when jobs it waited for stayed
	// held by another transaction.
	ErrLockTimeout = errors.New("prescient: jobs still held by another transaction")
)

// CatalogEntry says which events settle a check, and which entity it
// watches when it watches one only (checks.Opts.Entity; "" for any).
type CatalogEntry struct {
	Check  string
	Awaits []string
	Entity string
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

// JobListParams selects pending jobs for operators, soonest first: in
// (next_check_at, id) order, after the position (AfterAt, AfterID) when
// AfterID is set, at most Limit.
type JobListParams struct {
	Entity string
	// Key needs Entity.
	Key   string
	Check string
	// Slot, when set, keeps the jobs due exactly in it.
	Slot time.Time
	// Before, when set, keeps the jobs due before it: with the current slot,
	// the overdue ones.
	Before time.Time
	// AfterAt and AfterID continue a listing after its last job.
	AfterAt time.Time
	AfterID int64
	Limit   int
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

// JobCancelCheckParams cancels pending jobs of one check: at most Limit
// (positive) jobs, of entity Entity only when it is set, the first in the
// order of the (entity, entity_key) identity after After (the zero JobRef:
// from the first).
type JobCancelCheckParams struct {
	Check, Entity string
	After         JobRef
	Limit         int
	Now           time.Time
	By            string
}

// JobCancelCheckResult is what one JobCancelCheck did: how many jobs it
// cancelled and the last of them, which the next call starts after.
type JobCancelCheckResult struct {
	Cancelled int
	Last      JobRef
}

// JobRef names the job of one check by its entity and key.
type JobRef struct {
	Entity, Key string
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

// JobsReslotParams moves overdue jobs to a later slot.
type JobsReslotParams struct {
	// From, when set, keeps jobs due before it where they are: the jobs
	// moved are those due in [From, Before).
	From   time.Time
	Before time.Time
	To     time.Time
	Now    time.Time
	// Except are slots whose jobs stay where they are (slots the engine
	// is firing).
	Except []time.Time
	// Limit, when positive, moves at most that many jobs, the soonest due
	// first, so that a large reslot runs in transactions of a bounded size.
	Limit int
}

// JobStatsParams asks for the pending table's summary as of the slot Current.
type JobStatsParams struct {
	// Current is the slot now in progress: jobs due before it are overdue,
	// jobs due at or after it are upcoming.
	Current time.Time
	// Upcoming caps the number of upcoming slots listed.
	Upcoming int
}

// BeginParams are the settings of a processing transaction.
type BeginParams struct {
	// IdleTimeout, when positive, is how long the database lets the
	// transaction wait for its next statement before it ends the session
	// and releases its locks: a process that stops (frozen, its host
	// suspended) without its connections closing would otherwise hold the
	// jobs it claimed until it resumes. SQLite ignores it: a process
	// stopped there holds the file's write lock, which no setting of the
	// database takes back.
	IdleTimeout time.Duration
}

// ClaimParams says which jobs a processing transaction claims.
type ClaimParams struct {
	IDs  []int64
	Slot time.Time
	// LockWait, when positive, makes Claim wait up to this long for jobs
	// another transaction holds, instead of skipping them.
	LockWait time.Duration
}

// ApplyParams are the decisions of one processing transaction.
type ApplyParams struct {
	// Slot is the slot the jobs were due in: a checked job's last_check_at.
	Slot time.Time
	// Now is written as updated_at and as finished_at.
	Now time.Time
	// Server is written into history records' FinishedBy.
	Server string
	// Decisions holds one decision per job to change; a job claimed and left
	// out stays as it was.
	Decisions []Decision
	// Attempt, if not 0, is the attempt (AttemptStart) the transaction ends:
	// it is deleted with the decisions, and so is gone once they commit.
	Attempt int64
	// Settled names jobs whose earlier attempts, left behind, end with this
	// transaction: each is taken out of every attempt that names it, and an
	// attempt left naming no job is deleted.
	Settled []int64
}

// AttemptStartParams records that a server is about to run jobs' checks.
type AttemptStartParams struct {
	Server    string
	Slot      time.Time
	StartedAt time.Time
	IDs       []int64
}

// Attempt is a recorded start of checks (AttemptStart) not yet ended.
type Attempt struct {
	ID        int64
	Server    string
	Slot      time.Time
	StartedAt time.Time
	JobIDs    []int64
}

// Validate reports decisions that cannot be applied: one that changes
// nothing, names an unknown outcome, or a job named twice. A driver calls it
// before applying anything.
func (p *ApplyParams) Validate() error {
	seen := make(map[int64]bool, len(p.Decisions))
	for i, d := range p.Decisions {
		switch {
		case d.Released():
			return fmt.Errorf("decision %d (job %d) changes nothing: leave the job out instead", i, d.ID)
		case seen[d.ID]:
			return fmt.Errorf("decision %d: job %d has two decisions", i, d.ID)
		}
		seen[d.ID] = true
		if d.Outcome != "" {
			if _, err := history.ParseOutcome(string(d.Outcome)); err != nil {
				return fmt.Errorf("decision %d (job %d): %w", i, d.ID, err)
			}
		}
	}
	return nil
}

// Decision is the new state of one claimed job. Exactly one of three things
// happens: Outcome set moves the job to history; otherwise Next set keeps it
// pending until Next; neither set leaves the row untouched (released, e.g. for
// a check this server does not know), and such a decision is never applied.
type Decision struct {
	// ID is the job's id.
	ID int64
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
	// Lateness is how long after the slot the check started; it replaces the
	// job's lateness.
	Lateness time.Duration
}

// Released reports whether the decision leaves the row as it was.
func (d Decision) Released() bool { return d.Outcome == "" && d.Next.IsZero() }

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
// While a firing runs, the server records what its groups did so far every
// Config.Heartbeat (the counts, outcomes and Took below), so that the row
// shows a long slot's progress, and keeps it up to that record when the
// server dies in the firing.
type SlotRecord struct {
	Slot   time.Time `json:"slot"`
	Server string    `json:"server"`
	// Kind is "fire" for a slot fired at its boundary, "catchup" for a past
	// slot fired late, "sweep" for a sweep in run mode.
	Kind string `json:"kind"`
	// StartedAt is the first firing's start: the slot's lag is StartedAt
	// less Slot.
	StartedAt time.Time `json:"started_at"`
	// FinishedAt is zero while the slot is in progress, or if its server died;
	// otherwise the latest firing's finish.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Took is the time the server spent firing the slot, every firing's own
	// duration added up (a slot fired at its boundary and again by a sweep
	// an hour later took the two firings' time, not the hour between). A
	// firing cut short adds its time as well; a server that died in one
	// adds its time up to its last progress record that counted something. A row an older prescient finished, which kept no
	// time, reads as the span from StartedAt to FinishedAt; an older
	// prescient's firing of a row this one wrote (after a rollback) adds no
	// time to it. Measured on the client's clock (Config.Now), as StartedAt
	// and FinishedAt are.
	Took time.Duration `json:"took_ns"`
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

// RunningOn reports whether the row's server, s, is firing the slot now:
// the row is unfinished, s is the row's server, s is live (Server.Live: a
// heartbeat within its own timeout of now, or within timeout when it
// recorded none) and its latest heartbeat listed the slot among
// those it was firing (Server.Firing). A firing whose ledger finish was lost
// leaves the list at the server's next heartbeat, and one of a process that
// died is in no live server's list. s may be nil (not registered).
func (r *SlotRecord) RunningOn(s *Server, now time.Time, timeout time.Duration) bool {
	return s != nil && s.Name == r.Server && !r.Complete() && s.Live(now, timeout) &&
		slices.ContainsFunc(s.Firing, r.Slot.Equal)
}

// Add adds the counts and Took of o to r (Unknown included) and keeps the
// larger MaxLateness. A nil o adds nothing.
func (r *SlotRecord) Add(o *SlotRecord) {
	if o == nil {
		return
	}
	r.Checked += o.Checked
	r.Rescheduled += o.Rescheduled
	r.Failures += o.Failures
	r.Unknown += o.Unknown
	for k, v := range o.Outcomes {
		if r.Outcomes == nil {
			r.Outcomes = make(map[history.Outcome]int)
		}
		r.Outcomes[k] += v
	}
	r.Took += o.Took
	r.MaxLateness = max(r.MaxLateness, o.MaxLateness)
}

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
	// Firing are the slots the server was firing at its latest heartbeat
	// (its ticks, sweeps and FireSlot calls), oldest first; never nil when
	// read, and empty when the latest heartbeat did not write it (an older
	// prescient's). A slot a server fires past its end is "running" while
	// listed.
	Firing []time.Time `json:"firing"`
	// Timeout is the server's own ServerTimeout, as its latest heartbeat
	// recorded it; zero from an older prescient. Status readers judge the
	// server by it (Live).
	Timeout time.Duration `json:"timeout_ns,omitzero"`
	// Checks names the checks the server runs, sorted, as its latest
	// heartbeat recorded them; nil when it did not (an older prescient),
	// so that no one can say which it runs.
	Checks []string `json:"checks"`
	// Ownership is how the server owns positions, as its latest heartbeat
	// recorded it: OwnershipAuto, OwnershipStatic or OwnershipEvery; ""
	// when it did not (an older prescient), which servers of automatic
	// ownership take for one of theirs.
	Ownership string `json:"ownership,omitempty"`
}

// The ways a server owns positions (Server.Ownership).
const (
	OwnershipAuto   = "auto"   // shares them with the other live servers of automatic ownership
	OwnershipStatic = "static" // fires those its static map gives it
	OwnershipEvery  = "every"  // fires every position
)

// Live reports whether the server heartbeated within its own Timeout of
// now, or within timeout when it recorded none.
func (s *Server) Live(now time.Time, timeout time.Duration) bool {
	if s.Timeout > 0 {
		timeout = s.Timeout
	}
	return now.Sub(s.HeartbeatAt) <= timeout
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
	// Inserted, on a job Client.Schedule (or ScheduleMany) returns, says
	// the call created it; false means it was pending, and OnConflict
	// decided what happened to it. It is false on a job read any other way.
	Inserted bool `json:"-"`
}

// CheckJobsImport reports what makes jobs unfit for Driver.JobsImport before
// any database is asked: an id that is not positive, or an id or an (entity,
// key, check) that appears twice. Every driver calls it first, so that all
// refuse the same input with the same message.
func CheckJobsImport(jobs []*Job) error {
	type identity struct{ entity, key, check string }
	seenID := make(map[int64]bool, len(jobs))
	seenKey := make(map[identity]bool, len(jobs))
	for _, j := range jobs {
		name := j.Entity + "/" + j.Key + "/" + j.Check
		switch k := (identity{j.Entity, j.Key, j.Check}); {
		case j.ID < 1:
			return fmt.Errorf("import %d job(s): job %s has id %d, want a positive id", len(jobs), name, j.ID)
		case seenID[j.ID]:
			return fmt.Errorf("import %d job(s): id %d appears twice (job %s)", len(jobs), j.ID, name)
		case seenKey[k]:
			return fmt.Errorf("import %d job(s): job %s appears twice", len(jobs), name)
		default:
			seenID[j.ID], seenKey[k] = true, true
		}
	}
	return nil
}
