package postgres_test

import (
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// runJob processes the job (order, key, unshipped), due in slot, with one
// decision, failing the test unless it was claimed.
func runJob(t *testing.T, s *postgres.Store, key string, slot time.Time, d driver.Decision) {
	t.Helper()
	ctx := t.Context()
	j, err := s.JobGet(ctx, "order", key, "unshipped")
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	tx, err := s.Begin(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	jobs, err := tx.Claim(ctx, &driver.ClaimParams{IDs: []int64{j.ID}, Slot: slot})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim %s in %s: %d jobs, %v; want 1", key, slot.Format(time.RFC3339), len(jobs), err)
	}
	d.ID = j.ID
	if err := tx.Apply(ctx, &driver.ApplyParams{Slot: slot, Now: slot, Server: "test", Decisions: []driver.Decision{d}}); err != nil {
		t.Fatalf("apply to %s: %v", key, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit %s: %v", key, err)
	}
}

// prescient_schedule with 'replace' moves the first check of a job that no
// check has run to a result yet (last_check_at NULL) along with its next
// check, later or earlier; once a check has run, the first check stays.
// 'keep' moves nothing.
func TestSQLScheduleMovesFirstCheckUntilRun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	base := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	slot := func(n int) time.Time { return base.Add(time.Duration(n) * 15 * time.Minute) }
	step := func(what, key string, at time.Time, rule string, first, next time.Time) {
		t.Helper()
		var got time.Time
		err := s.Pool().QueryRow(ctx, `SELECT prescient_schedule('order', $1, 'unshipped', $2, NULL, $3)`,
			key, at, rule).Scan(&got)
		if err != nil {
			t.Fatalf("%s: prescient_schedule(%s, %s, %s): %v", what, key, at.Format(time.RFC3339), rule, err)
		}
		j, err := s.JobGet(ctx, "order", key, "unshipped")
		if err != nil {
			t.Fatalf("%s: get %s: %v", what, key, err)
		}
		if !got.Equal(next) || !j.FirstCheckAt.Equal(first) || !j.NextCheckAt.Equal(next) {
			t.Errorf("%s: returned %s, stored first %s next %s; want first %s next %s", what,
				got.UTC().Format(time.RFC3339), j.FirstCheckAt.Format(time.RFC3339), j.NextCheckAt.Format(time.RFC3339),
				first.Format(time.RFC3339), next.Format(time.RFC3339))
		}
	}

	step("schedule", "a", slot(40).Add(-time.Minute), "replace", slot(40), slot(40))
	step("never run, replaced earlier", "a", slot(2), "replace", slot(2), slot(2))
	step("never run, replaced later", "a", slot(30).Add(-time.Second), "replace", slot(30), slot(30))
	step("never run, kept", "a", slot(5), "keep", slot(30), slot(30))
	step("never run, replaced earlier again", "a", slot(4), "replace", slot(4), slot(4))

	// A failed check did not run to a result.
	step("schedule", "failed", slot(1), "replace", slot(1), slot(1))
	runJob(t, s, "failed", slot(1), driver.Decision{Next: slot(2), Err: "boom"})
	step("failed once, replaced", "failed", slot(6), "replace", slot(6), slot(6))

	step("schedule", "ran", slot(1), "replace", slot(1), slot(1))
	runJob(t, s, "ran", slot(1), driver.Decision{Next: slot(3), Checked: true})
	step("run, replaced later", "ran", slot(9), "replace", slot(1), slot(9))
	step("run, replaced earlier", "ran", slot(2), "replace", slot(1), slot(2))
	step("run, kept", "ran", slot(7), "keep", slot(1), slot(2))

	runJob(t, s, "a", slot(4), driver.Decision{Outcome: history.Done, Checked: true})
	runJob(t, s, "ran", slot(2), driver.Decision{Outcome: history.Done, Checked: true})
	for key, want := range map[string][2]time.Time{"a": {slot(4), slot(4)}, "ran": {slot(1), slot(2)}} {
		recs, err := s.HistoryList(ctx, history.Filter{Entity: "order", Key: key})
		if err != nil || len(recs) != 1 {
			t.Fatalf("history of %s: %d records, %v; want 1", key, len(recs), err)
		}
		if r := recs[0]; !r.FirstCheckAt.Equal(want[0]) || !r.LastCheckAt.Equal(want[1]) {
			t.Errorf("history of %s: first %s last %s, want %s, %s", key,
				r.FirstCheckAt.Format(time.RFC3339), r.LastCheckAt.Format(time.RFC3339),
				want[0].Format(time.RFC3339), want[1].Format(time.RFC3339))
		}
	}
}

// Migration 00007 gives the pending jobs that the old rule left with a first
// check after their last (rescheduled before they ever ran, then run) their
// last check as their first; it leaves every other job alone, and its Down
// restores the functions of 00004 and 00001.
func TestMigrationRepairsFirstCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, provider := migratedTo(t, 6)
	ts := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	jobs := []struct {
		key               string
		first, next, last string // last "" for NULL
		wantFirst         string
	}{
		{"legacy", "2030-01-01T00:00:00Z", "2026-03-11T10:15:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:15:00Z"},
		{"ran", "2026-03-10T09:00:00Z", "2026-03-11T10:15:00Z", "2026-03-10T10:15:00Z", "2026-03-10T09:00:00Z"},
		{"same", "2026-03-10T10:15:00Z", "2026-03-11T10:15:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:15:00Z"},
		{"never", "2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z", "", "2030-01-01T00:00:00Z"},
	}
	for _, j := range jobs {
		var last *time.Time
		if j.last != "" {
			v := ts(j.last)
			last = &v
		}
		if _, err := s.Pool().Exec(ctx, `INSERT INTO prescient_jobs (entity, entity_key, check_name,
				first_check_at, next_check_at, last_check_at, check_count, created_at, updated_at)
			VALUES ('order', $1, 'unshipped', $2, $3, $4, CASE WHEN $4::timestamptz IS NULL THEN 0 ELSE 1 END, now(), now())`,
			j.key, ts(j.first), ts(j.next), last); err != nil {
			t.Fatalf("insert %s: %v", j.key, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	for _, j := range jobs {
		got, err := s.JobGet(ctx, "order", j.key, "unshipped")
		if err != nil {
			t.Fatalf("get %s: %v", j.key, err)
		}
		if !got.FirstCheckAt.Equal(ts(j.wantFirst)) || !got.NextCheckAt.Equal(ts(j.next)) {
			t.Errorf("%s after migrating: first %s next %s, want first %s next %s", j.key,
				got.FirstCheckAt.Format(time.RFC3339), got.NextCheckAt.Format(time.RFC3339), j.wantFirst, j.next)
		}
	}

	if _, err := provider.DownTo(ctx, 6); err != nil {
		t.Fatalf("migrate down to 6: %v", err)
	}
	// Fresh connections, as a server of that version would start with:
	// migrating down past 00011 changes the key columns' collation, and a
	// statement prepared before that returns them fails once ("cached plan
	// must not change result type").
	s.Pool().Reset()
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	// The 00004 rule again: replacing keeps the first check of a job never run.
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', 'never', 'unshipped', '2031-01-01T00:00:00Z')`); err != nil {
		t.Fatalf("prescient_schedule after migrating down: %v", err)
	}
	if got, err := s.JobGet(ctx, "order", "never", "unshipped"); err != nil || !got.FirstCheckAt.Equal(ts("2030-01-01T00:00:00Z")) {
		t.Errorf("after migrating down, replace moved the first check: %+v, %v", got, err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT prescient_cancel('order', 'legacy')`).Scan(&n); err != nil || n != 1 {
		t.Errorf("prescient_cancel after migrating down: %d, %v; want 1", n, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate up again: %v", err)
	}
}
