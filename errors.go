package prescient

import (
	"errors"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// ErrNotFound is returned when a job that must exist does not. A check's
// QueryRow reports it (wrapped) when its query returned no row.
var ErrNotFound = driver.ErrNotFound

// ErrTxType is returned when a method of the untyped Client is given a
// transaction of a type the store does not use (a *sql.Tx to the PostgreSQL
// store, say). A TypedClient makes that a compile error instead.
var ErrTxType = driver.ErrTxType

// ErrClosed is what Ready returns once Stop has begun, until the client is
// started again.
var ErrClosed = errors.New("prescient: client stopped")

// ErrSchemaNewer is what `prescient migrate` returns for a database whose
// schema a newer prescient migrated.
var ErrSchemaNewer = driver.ErrSchemaNewer

// ErrNotMigrated is returned when prescient's tables are missing from the
// database: run Store.Migrate (`prescient migrate`) first.
var ErrNotMigrated = driver.ErrNotMigrated

// ErrOutOfRange is wrapped by the error Schedule, ScheduleMany and
// Reschedule (and their …Tx twins) return for a check time that lies, or
// rounds up to a slot that lies, outside [slots.MinTime, slots.MaxTime).
var ErrOutOfRange = slots.ErrOutOfRange

// ErrWrongEntity is returned by Schedule for a job whose check the client
// runs for another entity only (checks.Opts.Entity): the job could only
// fail.
var ErrWrongEntity = errors.New("wrong entity for the check")

// ErrNotStarted is Ready's error for a client that Start has not started,
// or whose first heartbeat has not come yet.
var ErrNotStarted = errors.New("not started")
