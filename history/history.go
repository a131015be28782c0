// Package history describes what happens to a job when it leaves the pending
// table: its outcome and the record kept of it, and the filters used to read
// those records back. The stores write and query the records; this package
// only holds the types and their rules.
package history

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Outcome says why a job left the pending table.
type Outcome string

const (
	// Done: the check returned no next time.
	Done Outcome = "done"
	// Resolved: the event the check awaited happened (see Client.Resolve).
	Resolved Outcome = "resolved"
	// Cancelled: the application cancelled the job.
	Cancelled Outcome = "cancelled"
	// GuardMaxChecks: the check asked to run again after using all its checks.
	GuardMaxChecks Outcome = "guard_max_checks"
	// GuardHorizon: the check asked for a next time beyond the horizon.
	GuardHorizon Outcome = "guard_horizon"
	// GuardPast: the check asked for a next time not after the slot it ran in.
	GuardPast Outcome = "guard_past"
	// Failed: the check failed (error, panic, timeout) more times in a row than
	// allowed.
	Failed Outcome = "failed"
)

// Outcomes lists every outcome, in the order the CLI shows them.
var Outcomes = []Outcome{Done, Resolved, Cancelled, GuardMaxChecks, GuardHorizon, GuardPast, Failed}

// ParseOutcome returns the outcome named s, or an error listing the valid names.
func ParseOutcome(s string) (Outcome, error) {
	for _, o := range Outcomes {
		if string(o) == s {
			return o, nil
		}
	}
	names := make([]string, len(Outcomes))
	for i, o := range Outcomes {
		names[i] = string(o)
	}
	return "", fmt.Errorf("unknown outcome %q (want one of %s)", s, strings.Join(names, ", "))
}

// Record is the history row of one finished job.
type Record struct {
	ID     int64  `json:"id"`
	Entity string `json:"entity"`
	Key    string `json:"key"`
	Check  string `json:"check"`
	// Outcome says why the job finished.
	Outcome Outcome `json:"outcome"`
	// FirstCheckAt is the slot the job was first due in.
	FirstCheckAt time.Time `json:"first_check_at"`
	// LastCheckAt is the slot of the last check that ran; zero when none ran
	// (a job cancelled or resolved before its time).
	LastCheckAt time.Time `json:"last_check_at,omitzero"`
	// CheckCount is how many checks ran to a result.
	CheckCount int `json:"check_count"`
	// FailureCount is how many checks in a row failed before the job finished.
	FailureCount int `json:"failure_count"`
	// Runtime is the total time spent in the job's checks.
	Runtime time.Duration `json:"runtime_ns"`
	// Lateness is how long after its slot the last check actually ran.
	Lateness  time.Duration   `json:"lateness_ns"`
	LastError string          `json:"last_error,omitempty"`
	Payload   json.RawMessage `json:"payload,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	// FinishedAt is when the job left the pending table.
	FinishedAt time.Time `json:"finished_at"`
	// FinishedBy names the server that finished the job, or "api" (the Go
	// library and the HTTP API; Config.FinishedBy), "cli" (a command),
	// "sql" (the SQL functions) or "retire" (a check retired).
	FinishedBy string `json:"finished_by"`
}

// LimitDefault is the number of records a query returns when Filter.Limit is 0.
const LimitDefault = 100

// LimitMax is the largest Filter.Limit accepted.
const LimitMax = 100_000

// Filter selects history records. Zero fields do not filter. Records come back
// newest first (by FinishedAt, then ID).
type Filter struct {
	Entity string
	// Key filters on the entity key; it needs Entity.
	Key      string
	Check    string
	Outcomes []Outcome
	// Since and Until bound FinishedAt: Since <= FinishedAt < Until.
	Since time.Time
	Until time.Time
	// AfterAt and AfterID continue a listing after its last record: give
	// them the FinishedAt and ID of the last record a previous call
	// returned, and the call returns the records after it, in the same
	// order (those that finished earlier, or at AfterAt with a lower ID).
	// Until cannot do this alone: the records of one transaction share
	// their FinishedAt, so a page may end in the middle of them. Both or
	// neither.
	AfterAt time.Time
	AfterID int64
	// Limit caps the number of records; 0 means LimitDefault.
	Limit int
	// NoPayload leaves each record's Payload out (nil), for a listing
	// that does not show them: a payload may be 64 KiB, so a page of
	// LimitMax records would otherwise read gigabytes.
	NoPayload bool
}

// Validate reports a filter that cannot be run, naming the field.
func (f Filter) Validate() error {
	if f.Key != "" && f.Entity == "" {
		return errors.New("history filter: key needs an entity")
	}
	for _, o := range f.Outcomes {
		if _, err := ParseOutcome(string(o)); err != nil {
			return fmt.Errorf("history filter: %w", err)
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("history filter: since %s is not before until %s", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	switch {
	case f.AfterID < 0:
		return fmt.Errorf("history filter: after id %d must be a record's id (positive)", f.AfterID)
	case f.AfterID > 0 && f.AfterAt.IsZero():
		return fmt.Errorf("history filter: after id %d needs after at, the finished time of that record", f.AfterID)
	case f.AfterID == 0 && !f.AfterAt.IsZero():
		return fmt.Errorf("history filter: after at %s needs after id, the id of that record", f.AfterAt.Format(time.RFC3339Nano))
	}
	if f.Limit < 0 || f.Limit > LimitMax {
		return fmt.Errorf("history filter: limit %d must be between 0 and %d", f.Limit, LimitMax)
	}
	return nil
}

// EffectiveLimit returns Limit, or LimitDefault when Limit is 0.
func (f Filter) EffectiveLimit() int {
	if f.Limit == 0 {
		return LimitDefault
	}
	return f.Limit
}

// CheckImport reports what makes recs unfit for a store's HistoryImport
// before any database is asked: an id that is not positive or appears twice,
// or an unknown outcome. Every store calls it first, so that both refuse the
// same input with the same message.
func CheckImport(recs []*Record) error {
	seen := make(map[int64]bool, len(recs))
	for _, r := range recs {
		if r.ID < 1 {
			return fmt.Errorf("import %d history record(s): record of %s/%s/%s has id %d, want a positive id",
				len(recs), r.Entity, r.Key, r.Check, r.ID)
		}
		if seen[r.ID] {
			return fmt.Errorf("import %d history record(s): id %d appears twice", len(recs), r.ID)
		}
		seen[r.ID] = true
		if _, err := ParseOutcome(string(r.Outcome)); err != nil {
			return fmt.Errorf("import %d history record(s): record %d: %w", len(recs), r.ID, err)
		}
	}
	return nil
}
