// Package checks defines what a check is: a named decision procedure that is
// handed one due job (or a batch of due jobs of one check) and answers with
// the job's next check time, or nothing when the job is done. It also holds
// the Registry the engine looks checks up in, and the rules every store
// relies on for what a job may hold: ValidateName, ValidateKey and
// ValidatePayload.
//
// A check looks up one entity by key. It may write its effect (an alert row, an
// outbox message) through Job.Tx: the effect then commits in the same
// transaction as the job's new state, so it happens exactly once. Effects
// outside the database are at-least-once; Job.IdempotencyKey names the attempt.
package checks
