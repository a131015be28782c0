package prescient

import "errors"

// ErrNotFound is returned when a job that must exist does not.
var ErrNotFound = errors.New("prescient: not found")

// ErrTxType is returned when a method is given a transaction of a type the
// store does not use (a *sql.Tx to the PostgreSQL store, say).
var ErrTxType = errors.New("prescient: transaction type does not match the store")

// ErrClosed is returned by a client that has been stopped.
var ErrClosed = errors.New("prescient: client stopped")

// ErrNotMigrated is returned when prescient's tables are missing from the
// database: run Store.Migrate (`prescient migrate`) first.
var ErrNotMigrated = errors.New("prescient: the database has no prescient tables yet: run `prescient migrate` (or Store.Migrate) first")
