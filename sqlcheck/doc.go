// Package sqlcheck builds checks from a declaration instead of Go code: a SQL
// condition evaluated for a whole batch of due keys, and a ladder of stages
// that each raise an event. It is what the `checks:` section of prescient's
// configuration file compiles to; a Go program can use it as well.
//
// # The query
//
// A Spec's Query is run once per batch of due jobs (up to the check's batch
// size, so that 10,000 due jobs cost one query per batch, not 10,000) in the
// batch's transaction. Its one parameter, $1, holds the due keys:
//
//   - PostgreSQL: an array of the keys, written as an array literal, so that
//     it reads as text[] (WHERE id = ANY($1)) or as an array of the column's
//     own type (WHERE id = ANY($1) on a bigint or uuid column);
//   - SQLite: a JSON array of the keys as strings
//     (WHERE id IN (SELECT value FROM json_each($1))).
//
// The query returns one row per key that is still "not there yet" (the order
// is still unshipped): a column named key, holding the key (text, or a
// number, which is compared as its decimal text), and any other columns,
// which are carried to the events as their payload, a JSON object of column
// name to value (numbers, text, booleans, timestamps as RFC 3339 text in
// UTC, NULL as null; cast other types to text in the query).
//
// # Stages
//
// Each Stage says: After this long from the anchor, raise Event. The anchor
// is the timestamp column named by Spec.Anchor (orders.placed_at, say) or,
// without one, the job's first check (checks.Job.FirstCheckAt). For each due
// job:
//
//   - its key is not returned: the job is done. The awaited thing happened
//     (the order shipped) or the entity is gone (the order was deleted);
//     nothing is raised.
//   - its key is returned: every stage whose time (anchor + After) is at or
//     before the job's slot is raised, in the order of the ladder, through
//     checks.Job.Emit, which records each stage once per job (the
//     idempotency key entity/key/check/stage): a stage raised before is not
//     raised again. The job's next check is the time of the next stage, and
//     after the last stage the job is done.
//
// Two cases follow from the rules rather than from special code:
//
//   - Catch-up. A job whose slot passed while no server ran is checked late,
//     in its own slot (the engine hands the check the slot it was due in):
//     it raises the stages due by that slot and asks for the next stage's
//     time, which is already past, so the engine runs it in the first slot
//     after now, where it raises that stage too. A server down past two
//     stages therefore raises both, in order, one slot apart. A job moved to
//     a later slot (a reslot sweep) raises every stage due by its new slot in
//     one check, in order.
//   - Early jobs. A job scheduled before its anchor's first stage (the check
//     scheduled when the order is placed, the first stage after 3h) raises
//     nothing: its key is returned, no stage is due, and its next check is
//     the first stage's time. With no anchor column, write after: 0s for a
//     stage raised at the job's first check.
//
// # Failures
//
// A query that fails (its error is the reason), returns a key that was not
// among the due keys, returns a key twice, or returns a NULL key fails its
// jobs, retried and finally failed like any check, with the reason in the
// job's history. The query runs in a savepoint, and when it fails it runs
// again for each half of the keys, and so on, so that a key the query
// cannot take (one that does not cast to the column's type, say) fails its
// own job and not the batch; a query that fails whatever the keys stops
// being split after a few dozen queries and fails the jobs left. A query
// that runs past the check's runtime guard fails the whole batch. A
// job whose anchor is NULL or not a time, whose payload is too large, or
// whose entity is not the check's, fails alone: the batch's other jobs go
// on, and their events are recorded.
//
// # Validation
//
// Spec.Validate checks what needs no database: names, stages in strictly
// increasing order of After (After >= 0), stage names unique, guards and
// batch size. Prepare then prepares the query against the database through a
// Database (PostgreSQL: the statement is prepared on a connection; SQLite:
// the statement is prepared and run), runs it once with no keys in a
// read-only transaction, and checks that it takes exactly the one parameter
// $1, returns a key column and the anchor column (a timestamp, on
// PostgreSQL), names no column twice, writes nothing and returns no row for
// no keys. A typo in a column is thus an error when the server starts,
// naming the check, not a failure at 3 a.m.
package sqlcheck
