package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Job is one due job as a check sees it.
type Job struct {
	// ID identifies the pending row; it stays the same across checks.
	ID     int64
	Entity string
	Key    string
	Check  string
	// FirstCheckAt is the slot of the job's first check. Until a check of
	// the job has run to a result, rescheduling the job (Reschedule, or
	// Schedule with the replace rule) moves it with the next check; after
	// that it stays. For a fixed anchor, read your own data (the time the
	// order was placed).
	FirstCheckAt time.Time
	// Slot is the slot the job is due in (its next_check_at).
	Slot time.Time
	// Now is when the check actually runs; Now-Slot is the lateness.
	Now time.Time
	// CheckCount is how many checks ran to a result before this one.
	CheckCount int
	// FailureCount is how many checks in a row failed before this one.
	FailureCount int
	// LastError is the error of the last failed check, if the last one failed.
	LastError string
	// Payload is the JSON the job was scheduled with, or nil.
	Payload json.RawMessage
	// CreatedAt is when the job was first scheduled.
	CreatedAt time.Time
	// Horizon is how far after Slot (or after Now, when the check runs
	// later than its slot, in a catch-up) the check may ask for its next
	// check (its guards.horizon): a later time ends the job guard_horizon.
	// 0 or less when there is no limit. A check waiting for something
	// further off asks for Slot+Horizon and looks again then.
	Horizon time.Duration
	// Tx is the transaction the job's result commits in. Writes made through it
	// commit together with the job's new state, or not at all (they are rolled
	// back if the check fails). It is valid only until the check returns.
	Tx Tx
	// Outbox records the events the check emits (see Emit) in Tx.
	Outbox Outbox
}

// Lateness is how long after its slot the check runs.
func (j *Job) Lateness() time.Duration { return j.Now.Sub(j.Slot) }

// IdempotencyKey names this attempt of this job's check for effects outside
// the database: entity, key, check and the number of the check (1 for the
// first). A retry after a failure carries the same key.
func (j *Job) IdempotencyKey() string {
	return fmt.Sprintf("%s/%s/%s/%d", j.Entity, j.Key, j.Check, j.CheckCount+1)
}

// Tx is the slice of a store transaction a check may use. SQL is the store's
// dialect (PostgreSQL or SQLite); parameters are written $1, $2, … in both.
type Tx interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// QueryRow runs a query expected to return at most one row.
	QueryRow(ctx context.Context, sql string, args ...any) Row
	// Query runs a query; the caller must Close the rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// Driver returns the underlying transaction (a pgx.Tx for the PostgreSQL
	// store, a *sql.Tx for SQLite) for checks that need more than this.
	Driver() any
}

// Row is one result row; Scan returns an error wrapping prescient.ErrNotFound
// when the query returned no row.
type Row interface {
	Scan(dest ...any) error
}

// Rows iterates a query's result.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}
