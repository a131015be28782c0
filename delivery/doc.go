// Package delivery delivers the events checks raise (checks.Job.Emit) to
// their sinks: a log line, a signed webhook, a PostgreSQL NOTIFY.
//
// The engine records each event in the outbox in the transaction of the
// check that raised it, with one pending delivery per sink of the check
// (see prescient's outbox.go). A Deliverer then runs one worker per sink:
// the worker claims the sink's due deliveries from the store with a lease
// (two servers never send the same delivery at once), sends them, and
// records each result: delivered, a retry at a later time (exponential
// backoff with jitter), or dead once the sink's attempts are used up. Its
// state is in the database only, so a server that stops or dies loses
// nothing: a delivery whose attempt never recorded a result is due again
// when its lease ends, and any server delivers it.
//
// Delivery is therefore at least once: a sink may see an event twice (its
// server died after sending and before recording), never zero times.
// Receivers deduplicate on the event's idempotency key,
// entity/key/check/stage, which a stage of a job keeps however often it is
// sent.
//
// A sink's worker runs beside the slots, on goroutines of its own: a slow
// or failing sink delays only its own deliveries, never the slots nor the
// other sinks.
package delivery
