// Package postgres is prescient's PostgreSQL store: it implements
// driver.Driver with pgx v5 over a pgxpool.Pool, and applies the migrations
// embedded in the migrations package with goose.
//
// Every method that may join the caller's transaction takes it as a pgx.Tx
// (tx any; nil means the store's own transaction); anything else is an error
// wrapping driver.ErrTxType. Errors never carry pgx types: pgx.ErrNoRows
// becomes driver.ErrNotFound and server errors become plain errors holding
// the server's message and SQLSTATE.
//
// Times are stored as timestamptz (microseconds) and come back in UTC;
// durations are stored as bigint microseconds. The store never reads the
// database's clock for anything the engine decides on: "now" is always a
// parameter. Only the SQL functions installed by the migrations
// (prescient_schedule, prescient_cancel, prescient_resolve), meant for
// applications written in other languages, read the database's clock:
// prescient_schedule reads statement_timestamp(), the start of the calling
// statement, so that a long transaction cannot schedule into a slot that has
// begun; the others write now() as the time a job finished.
package postgres
