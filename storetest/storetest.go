// Package storetest is the conformance suite every driver.Driver must pass,
// so that the PostgreSQL and SQLite stores mean the same thing. A store's
// package runs it from its own test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) *storetest.Harness { … })
//	}
//
// The suite speaks only through driver.Driver, the checks.Tx handed to
// process functions, and the few hooks of Harness; it imports no driver. Its
// SQL (a user table for effects) is written to run unchanged on PostgreSQL and
// SQLite.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// Harness is one fresh store under test and what the suite needs beyond the
// Store interface.
type Harness struct {
	// Store is migrated and empty, and no other test uses its database. The
	// harness closes it when the test ends; the suite never does.
	Store driver.Driver
	// Exec runs one statement outside any transaction, in the database the
	// store uses (the suite creates a user table with it).
	Exec func(ctx context.Context, sql string, args ...any) error
	// QueryInt runs a query returning one row of one integer, outside any
	// transaction.
	QueryInt func(ctx context.Context, sql string, args ...any) (int64, error)
	// BeginTx begins a transaction of the kind the store's tx parameters take.
	BeginTx func(ctx context.Context) (*Tx, error)
	// SetPruneBatch, when set, sets how many records one transaction of the
	// store's HistoryPrune deletes, so that the suite can prune across
	// batches.
	SetPruneBatch func(n int)
}

// Tx is a transaction begun by Harness.BeginTx.
type Tx struct {
	// Tx is the value to pass as a Store method's tx (a pgx.Tx, a *sql.Tx).
	Tx       any
	Commit   func() error
	Rollback func() error
}

// Run runs the suite: one subtest per behaviour, each with a harness of its
// own from newHarness, most of them in parallel.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h *Harness)
	}{
		{"MigrateTwice", testMigrateTwice},
		{"GridSave", testGridSave},
		{"ScheduleInsert", testScheduleInsert},
		{"ScheduleReplace", testScheduleReplace},
		{"ScheduleKeep", testScheduleKeep},
		{"ScheduleBulk", testScheduleBulk},
		{"Reschedule", testReschedule},
		{"FirstCheckMoves", testFirstCheckMoves},
		{"Cancel", testCancel},
		{"CancelCheck", testCancelCheck},
		{"Resolve", testResolve},
		{"JobsDuePaging", testJobsDuePaging},
		{"ProcessNext", testProcessNext},
		{"ProcessFailureThenSuccess", testProcessFailureThenSuccess},
		{"ProcessOutcomeChecked", testProcessOutcomeChecked},
		{"ProcessOutcomeFailed", testProcessOutcomeFailed},
		{"ProcessReleased", testProcessReleased},
		{"ProcessClaimsOnlyDue", testProcessClaimsOnlyDue},
		{"ProcessBadDecisions", testProcessBadDecisions},
		{"ProcessWritesCommit", testProcessWritesCommit},
		{"ProcessSavepoints", testProcessSavepoints},
		{"ProcessDiscardThenRetry", testProcessDiscardThenRetry},
		{"ProcessEmptySavepoints", testProcessEmptySavepoints},
		{"ProcessTxReads", testProcessTxReads},
		{"ProcessConcurrentClaimers", testProcessConcurrentClaimers},
		{"Attempts", testAttempts},
		{"OverdueSlots", testOverdueSlots},
		{"Reslot", testReslot},
		{"Stats", testStats},
		{"Ledger", testLedger},
		{"LedgerConcurrentFinishes", testLedgerConcurrentFinishes},
		{"LedgerRowOfAnOlderPrescient", testLedgerRowOfAnOlderPrescient},
		{"LedgerList", testLedgerList},
		{"HistoryFilters", testHistoryFilters},
		{"HistoryCountsAndPrune", testHistoryCountsAndPrune},
		{"HistoryLatest", testHistoryLatest},
		{"HistoryNoPayload", testHistoryNoPayload},
		{"Servers", testServers},
		{"TimesUTC", testTimesUTC},
		{"CallerTxRollback", testCallerTxRollback},
		{"CallerTxCommit", testCallerTxCommit},
		{"TxType", testTxType},
		{"CopyGridAndCatalog", testCopyGridAndCatalog},
		{"CopyJobsRoundTrip", testCopyJobsRoundTrip},
		{"CopyHistoryRoundTrip", testCopyHistoryRoundTrip},
		{"CopyIDSequence", testCopyIDSequence},
		{"CopyImportConflicts", testCopyImportConflicts},
		{"CopyImportCallerTx", testCopyImportCallerTx},
		{"CopyOutboxRoundTrip", testCopyOutboxRoundTrip},
		{"CopyOutboxImportConflicts", testCopyOutboxImportConflicts},
		{"OutboxRecord", testOutboxRecord},
		{"DeliveryLease", testDeliveryLease},
		{"DeliveryConcurrentClaims", testDeliveryConcurrentClaims},
		{"OutboxPrune", testOutboxPrune},
		{"DeliveriesRetry", testDeliveriesRetry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

// base is the first slot of every test: a fixed date on a 15-minute grid.
var base = time.Date(2031, time.March, 4, 5, 0, 0, 0, time.UTC)

// slot returns the n-th 15-minute slot after base.
func slot(n int) time.Time { return base.Add(time.Duration(n) * 15 * time.Minute) }

// at returns a microsecond-precision time d after base, for "now" values.
func at(d time.Duration) time.Time { return base.Add(d).Truncate(time.Microsecond) }

// schedule upserts one job with ConflictReplace at slot s, failing the test on error.
func schedule(t *testing.T, h *Harness, entity, key, check string, s time.Time, payload string) *driver.Job {
	t.Helper()
	p := &driver.JobScheduleParams{Entity: entity, Key: key, Check: check, At: s, Now: at(-time.Hour)}
	if payload != "" {
		p.Payload = json.RawMessage(payload)
	}
	res, err := h.Store.JobSchedule(t.Context(), nil, []*driver.JobScheduleParams{p})
	if err != nil {
		t.Fatalf("schedule %s/%s/%s: %v", entity, key, check, err)
	}
	if len(res) != 1 {
		t.Fatalf("schedule %s/%s/%s: %d results, want 1", entity, key, check, len(res))
	}
	return res[0].Job
}

// get returns the pending job, failing the test on error.
func get(t *testing.T, h *Harness, entity, key, check string) *driver.Job {
	t.Helper()
	j, err := h.Store.JobGet(t.Context(), entity, key, check)
	if err != nil {
		t.Fatalf("get %s/%s/%s: %v", entity, key, check, err)
	}
	return j
}

// wantGone fails unless the job is no longer pending.
func wantGone(t *testing.T, h *Harness, entity, key, check string) {
	t.Helper()
	j, err := h.Store.JobGet(t.Context(), entity, key, check)
	if err == nil {
		t.Fatalf("get %s/%s/%s: found %+v, want ErrNotFound", entity, key, check, j)
	}
	if !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("get %s/%s/%s: %v, want ErrNotFound", entity, key, check, err)
	}
}

// jsonEqual reports whether a and b hold the same JSON value (stores may
// normalise spacing); two empty values are equal.
func jsonEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// diff collects "field: got …, want …" lines.
type diff []string

func (d *diff) time(field string, got, want time.Time) {
	if !got.Equal(want) {
		*d = append(*d, field+": got "+got.Format(time.RFC3339Nano)+", want "+want.Format(time.RFC3339Nano))
	}
}

func (d *diff) val(field string, got, want any) {
	if !reflect.DeepEqual(got, want) {
		*d = append(*d, field+": got "+jsonString(got)+", want "+jsonString(want))
	}
}

func (d *diff) json(field string, got, want []byte) {
	if !jsonEqual(got, want) {
		*d = append(*d, field+": got "+string(got)+", want "+string(want))
	}
}

func (d diff) check(t *testing.T, what string) {
	t.Helper()
	for _, line := range d {
		t.Errorf("%s: %s", what, line)
	}
}

func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

// jobDiff compares every stored field of a job.
func jobDiff(got, want *driver.Job) diff {
	var d diff
	d.val("ID", got.ID, want.ID)
	d.val("Entity", got.Entity, want.Entity)
	d.val("Key", got.Key, want.Key)
	d.val("Check", got.Check, want.Check)
	d.time("FirstCheckAt", got.FirstCheckAt, want.FirstCheckAt)
	d.time("NextCheckAt", got.NextCheckAt, want.NextCheckAt)
	d.time("LastCheckAt", got.LastCheckAt, want.LastCheckAt)
	d.val("CheckCount", got.CheckCount, want.CheckCount)
	d.val("FailureCount", got.FailureCount, want.FailureCount)
	d.val("LastError", got.LastError, want.LastError)
	d.val("Runtime", got.Runtime, want.Runtime)
	d.val("Lateness", got.Lateness, want.Lateness)
	d.json("Payload", got.Payload, want.Payload)
	d.time("CreatedAt", got.CreatedAt, want.CreatedAt)
	d.time("UpdatedAt", got.UpdatedAt, want.UpdatedAt)
	return d
}
