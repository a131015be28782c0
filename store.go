package prescient

import (
	"context"
	"fmt"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// Store is a database prescient keeps its tables in: *postgres.Store or
// *sqlite.Store. Open one with its package's Open, Migrate it once, and hand
// it to NewClient or NewTypedClient.
type Store interface {
	// Migrate brings prescient's schema up to date. It is safe to run
	// repeatedly and from several processes at once.
	Migrate(ctx context.Context) error
	// Close releases the store's connections.
	Close()
	// Driver returns what the engine runs its queries through.
	Driver() driver.Driver
}

// TypedStore is a Store whose application transactions are of type TTx:
// *postgres.Store is a TypedStore[pgx.Tx], *sqlite.Store a
// TypedStore[*sql.Tx].
type TypedStore[TTx any] interface {
	Store
	driver.TxUnwrapper[TTx]
}

// Job is a pending job as stored.
type Job = driver.Job

// SlotRecord is one row of the slot ledger: one server's firings of one
// slot, added up.
type SlotRecord = driver.SlotRecord

// JobStats summarises the pending table (Status.Jobs).
type JobStats = driver.JobStats

// SlotLoad is the number of jobs pending in one slot.
type SlotLoad = driver.SlotLoad

// Server is a registered server, as Status lists it.
type Server = driver.Server

// ConflictRule says what scheduling does when the job (entity, key, check)
// is already pending.
type ConflictRule = driver.ConflictRule

const (
	// ConflictReplace (the default) moves the pending job's next check to the
	// new time, replaces its payload when a new one is given, and clears its
	// failure count. first_check_at, check_count and created_at stay: it is
	// still the same job, rescheduled.
	ConflictReplace = driver.ConflictReplace
	// ConflictKeep leaves the pending job untouched: scheduling becomes
	// idempotent for event handlers that may see the same event twice.
	ConflictKeep = driver.ConflictKeep
)

// RecordedGrid returns the slot grid the servers recorded in the store (by
// Start or `prescient migrate`), or ErrNotFound while none is. An
// application's client that only schedules must round on the servers' grid,
// or its jobs land in slots no server fires: set its Config.Grid as the
// servers do, or to this.
func RecordedGrid(ctx context.Context, store Store) (slots.Grid, error) {
	g, err := store.Driver().GridGet(ctx)
	if err != nil {
		return slots.Grid{}, fmt.Errorf("prescient: the slot grid the servers recorded: %w", err)
	}
	return g, nil
}
