// Package prescient acts when something has not happened in time: an order
// still unshipped three hours after it was placed, a payout not confirmed
// after a day.
//
// When the triggering event happens, the application schedules a check of
// that one entity, in the transaction that records the event
// (Client.ScheduleTx). Check times are rounded up to a grid of slots
// (slots.Grid). At each slot boundary the server that owns the slot runs
// exactly the checks due in it; each check (a checks.Func registered in a
// checks.Registry) looks its entity up by key and returns the time it wants
// to run again, or nothing when it is done. Guards (package guards) cap how
// often a job may run, how long a check may take and how far ahead it may
// ask to run again. Every job that finishes moves to a history table
// (package history) with its outcome, and a sweep catches up on slots that
// passed while no server was running.
//
// # Using it
//
// Open a store (postgres.Open, or sqlite.Open for a single host), migrate
// it, register checks, and build a client:
//
//	client, err := prescient.NewTypedClient(store, &prescient.Config{Checks: registry})
//
// A client that is never started only schedules, cancels and resolves, as an
// application process does; Resolve reads which checks await an event from
// the store's catalog, which a started server (or SyncCatalog, or `prescient
// migrate`) records. Start makes it a server: it fires the slots it owns
// until Stop. The …Tx methods join the application's transaction; a
// TypedClient has the compiler check its type (pgx.Tx for PostgreSQL,
// *sql.Tx for SQLite), the untyped Client checks it at run time.
//
// # How a slot fires
//
// The engine lists the slot's due jobs a page at a time and runs them in
// groups, up to Config.Workers groups at once, each in one transaction of
// the store: up to Config.GroupSize jobs of single-job checks, run one after
// the other, or one call of a batch check (checks.BatchFunc). Each check's
// writes through job.Tx stay its own: a check that fails, panics or overruns
// its runtime guard has its writes undone and a failure recorded, and the
// others' commit with their jobs' new states, in one statement and one
// commit for the whole group. By default a group runs without savepoints
// while its checks succeed and, when one fails, rolls back and runs again
// with a savepoint per check, without the failed one
// (Config.SavepointEveryCheck uses savepoints from the start). A check's writes and its
// job's new state commit together or not at all, so an effect written
// through job.Tx happens exactly once; effects outside the database are at
// least once (checks.Job.IdempotencyKey names the attempt).
//
// The protocol is written once, in this package, over the small interface of
// package driver, which the postgres and sqlite packages implement and the
// storetest package holds to one conformance suite.
package prescient
