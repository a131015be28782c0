// Package sqlite is prescient's embedded store: it implements driver.Driver
// on a single SQLite file through modernc.org/sqlite, a pure-Go driver (no
// cgo), and applies the migrations embedded in the migrations package with
// goose. It is the default for a single server and for a first run on a fresh
// machine; it means exactly what the PostgreSQL store means, and both pass the
// storetest conformance suite.
//
// # Sharing a file
//
// Several processes on ONE host may open the same file: the database runs in
// WAL mode, every transaction that writes takes SQLite's write lock up front
// (BEGIN IMMEDIATE), and a writer waits for another up to Opts.BusyTimeout. So
// two processes never process a job twice and never deadlock upgrading a read
// lock to a write lock. Several servers on several hosts need PostgreSQL:
// SQLite's locks do not work over network file systems.
//
// Writers are serialised. Where PostgreSQL claims rows with FOR UPDATE SKIP
// LOCKED, this store holds the whole database's write lock for the length of
// a processing transaction (a group of checks: the checks run inside it), so
// one group runs at a time, whatever the engine's workers: a second group
// waits for the first to commit and then finds the jobs it took gone from
// the slot. A group in this process waits for as long as its context lasts
// (the engine bounds each group by guards.runtime and group_duration, and
// stops at shutdown); one in another process waits up to Opts.BusyTimeout.
//
// Every other writer waits at most Opts.BusyTimeout and then fails with
// "database is locked": an application's Schedule, Cancel or Resolve (or a
// transaction begun on DB()) may wait that long behind a running check. So
// keep guards.runtime below Opts.BusyTimeout, or raise the busy timeout. A
// writer waits for the group running now only, not for the groups queued
// behind it, in the server's process and in others: every Store that opens
// the file says that it waits through a lock file beside it (the database's
// path with "-queue" added), and a server's next group lets it go first
// (see WriteTx for an application's own transactions). With two servers on
// one file, a server's own writes may wait for two groups, the other's and
// its own. A transaction begun on DB(), and a writer that does not use
// this package, waits in SQLite's busy handler alone, which polls: as the
// server hands the lock from one group to the next at once, it may wait for
// the server's whole run of groups, so give it a busy timeout that covers a
// slot's groups, or use PostgreSQL for several writers.
// A check must not write through the store outside the transaction it is
// handed: that write would wait for the lock its own batch holds, up to the
// busy timeout, and fail.
//
// # Transactions
//
// Methods that take tx accept a *sql.Tx begun on DB() or handed by WriteTx;
// anything else is an error wrapping driver.ErrTxType. Both begin with BEGIN
// IMMEDIATE, so that an application's "order placed" and "check scheduled"
// commit together without lock upgrades; WriteTx's transaction also waits
// its turn in the write queue. SQLite has no SQL functions callable
// from other languages' transactions: the SQL API of the PostgreSQL store
// (prescient_schedule, prescient_cancel, prescient_resolve) is PostgreSQL-only.
//
// # Values
//
// Times are stored as INTEGER microseconds since the Unix epoch, so that they
// round-trip like PostgreSQL's timestamptz: truncated to the microsecond and
// read back in UTC, whatever the zone they were given in. Durations are
// INTEGER microseconds; JSON (payloads, catalog entries, outcomes) is TEXT
// checked with json_valid. The store never reads the database's clock for
// anything the engine decides on: "now" is always a parameter.
package sqlite
