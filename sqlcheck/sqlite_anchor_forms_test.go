package sqlcheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// sqliteLadder is the README's ladder (3h warning, 24h critical) over a
// query whose anchor column is anchorExpr, on SQLite.
func sqliteLadder(d *db, table, anchorExpr string) sqlcheck.Spec {
	return sqlcheck.Spec{
		Name: "unshipped", Entity: "order",
		Query: `SELECT id AS key, ` + anchorExpr + ` AS placed_at FROM ` + table +
			` WHERE id IN (SELECT value FROM json_each($1)) AND status = 'unshipped'`,
		Anchor: "placed_at",
		Stages: []sqlcheck.Stage{
			{After: 3 * time.Hour, Event: "order.unshipped", Severity: "warning"},
			{After: 24 * time.Hour, Event: "order.unshipped.escalated", Severity: "critical"},
		},
	}
}

// TestSQLiteJulianDayAnchor: SQLite keeps dates in one of three
// forms (https://www.sqlite.org/lang_datefunc.html): ISO-8601 text, a REAL
// Julian day number (julianday('now')) or INTEGER unix seconds. A REAL
// anchor was read as unix seconds, so an order placed an hour ago as a
// Julian day (≈ 2460828) read as placed on 1970-01-29: on its first check
// both the 3h warning and the 24h critical escalation were raised at once,
// silently (found by a review). A number below 1e7 is a Julian day now.
func TestSQLiteJulianDayAnchor(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	d.exec(`CREATE TABLE jorders (id TEXT PRIMARY KEY, status TEXT NOT NULL, placed_at REAL NOT NULL)`)
	placed := epoch.Add(-time.Hour)
	d.exec(`INSERT INTO jorders VALUES ('1001', 'unshipped', julianday($1))`, placed.Format("2006-01-02 15:04:05"))
	e := d.newEngine(sqliteLadder(d, "jorders", "placed_at"))
	slot := epoch.Add(15 * time.Minute)
	e.schedule("unshipped", "1001", slot)
	e.fire(slot, slot)
	if evs := d.events("unshipped"); len(evs) != 0 {
		t.Errorf("order placed 1h15m before the slot (as a Julian day) raised %v; want nothing before placed+3h", evs)
	}
	if got, want := e.next("unshipped", "1001"), placed.Add(3*time.Hour); !got.Equal(want) {
		t.Errorf("next check %s, want the first stage's time %s", got, want)
	}
}

// TestSQLiteGoTimeTextAnchor: a Go application writing time.Time
// with the same SQLite driver prescient uses (modernc.org/sqlite) stores it
// as time.Time.String(), "2025-06-01 11:00:00 +0000 UTC". The driver turns
// it back into a time only for a column declared DATE/DATETIME/TIMESTAMP
// read directly; through any expression (COALESCE, max, CASE…) the anchor
// arrives as that text, which anchorTime did not parse: every job failed
// "is not a time" although the value is a time the driver itself wrote
// (found by a review).
func TestSQLiteGoTimeTextAnchor(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	d.exec(`ALTER TABLE orders ADD COLUMN promised_at timestamp`)
	placed := epoch.Add(-time.Hour)
	d.order("1001", "unshipped", placed, 1) // the harness writes a time.Time, as a Go application would
	e := d.newEngine(sqliteLadder(d, "orders", "COALESCE(promised_at, placed_at)"))
	slot := epoch.Add(3 * time.Hour)
	e.schedule("unshipped", "1001", slot)
	e.fire(slot, slot)
	j, err := e.client.Job(e.ctx, "order", "1001", "unshipped")
	if err == nil && j.LastError != "" {
		t.Errorf("anchor written by the Go driver, read through COALESCE: the check failed: %s", j.LastError)
	} else if err != nil {
		r := e.finished("unshipped", "1001")
		t.Errorf("job ended %s (%s); want the 3h warning raised and the job waiting for the escalation", r.Outcome, r.LastError)
	}
	if evs := d.events("unshipped"); len(evs) != 1 {
		t.Errorf("events %v, want the 3h warning", evs)
	}
}

// TestAnchorFirstStageBeyondHorizon: the README says "A job
// scheduled before its first stage's time raises nothing then and is
// checked again at that time". With an anchor, the configuration's horizon
// rule skips the first stage (cli/declared.go), but the engine's guard
// still judged the time the check asked for: an order scheduled when it was
// placed, with a first stage 100 days after placed_at (or an anchor 100
// days ahead), ended guard_horizon at its first check and its stage was
// never raised (found by a review). The check now asks for no more than
// its horizon (checks.Job.Horizon) and looks again then.
func TestAnchorFirstStageBeyondHorizon(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	spec := sqlcheck.Spec{
		Name: "stale", Entity: "order",
		Query:  `SELECT id AS key, placed_at FROM orders WHERE id IN (SELECT value FROM json_each($1)) AND status = 'unshipped'`,
		Anchor: "placed_at",
		Stages: []sqlcheck.Stage{{After: 100 * 24 * time.Hour, Event: "order.stale"}},
	}
	d.exec(`INSERT INTO orders (id, status, placed_at) VALUES ('1001', 'unshipped', $1)`, epoch.Format("2006-01-02 15:04:05"))
	e := d.newEngine(spec)
	slot := epoch.Add(15 * time.Minute) // scheduled when the order is placed
	e.schedule("stale", "1001", slot)
	e.fire(slot, slot)
	// Checked again at the horizon (90 days, the default), then at the stage.
	again := slot.Add(guards.HorizonDefault)
	if got := e.next("stale", "1001"); !got.Equal(again) {
		t.Fatalf("after the first check, 100 days before the stage: next check %s, want %s (the horizon)", got, again)
	}
	e.fire(again, again)
	stage := epoch.Add(100 * 24 * time.Hour)
	if got := e.next("stale", "1001"); !got.Equal(stage) {
		t.Fatalf("at the horizon: next check %s, want the stage's time %s", got, stage)
	}
	if evs := d.events("stale"); len(evs) != 0 {
		t.Fatalf("raised %v before the stage", evs)
	}
	e.fire(stage, stage)
	if evs := d.events("stale"); len(evs) != 1 {
		t.Errorf("at the stage: raised %v, want order.stale once", evs)
	}
}

// TestSQLiteMillisecondAnchor: an INTEGER anchor in milliseconds
// (JavaScript's Date.now(), a common way to store a time in SQLite) was
// read as seconds, year 57386; the job ended guard_horizon with "next check
// 57386-06-29T11:00:00Z is beyond the supported range", which named neither
// the anchor column nor the likely cause (found by a review). From 1e11 a
// number is read as milliseconds.
func TestSQLiteMillisecondAnchor(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	d.exec(`CREATE TABLE morders (id TEXT PRIMARY KEY, status TEXT NOT NULL, placed_at INTEGER NOT NULL)`)
	placed := epoch.Add(-time.Hour)
	d.exec(`INSERT INTO morders VALUES ('1001', 'unshipped', $1)`, placed.UnixMilli())
	e := d.newEngine(sqliteLadder(d, "morders", "placed_at"))
	slot := epoch.Add(15 * time.Minute)
	e.schedule("unshipped", "1001", slot)
	e.fire(slot, slot)
	if got, want := e.next("unshipped", "1001"), placed.Add(3*time.Hour); !got.Equal(want) {
		t.Errorf("anchor in milliseconds: next check %s, want the first stage's time %s", got, want)
	}
}

// A number that is no time in any of the forms read (seconds, milliseconds,
// a Julian day) fails the job naming the anchor column and the forms.
func TestSQLiteAnchorNumberOutOfRange(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	d.exec(`CREATE TABLE xorders (id TEXT PRIMARY KEY, status TEXT NOT NULL, placed_at INTEGER NOT NULL)`)
	d.exec(`INSERT INTO xorders VALUES ('1001', 'unshipped', 1000000000000000000)`)
	e := d.newEngine(sqliteLadder(d, "xorders", "placed_at"))
	slot := epoch.Add(15 * time.Minute)
	e.schedule("unshipped", "1001", slot)
	e.fire(slot, slot)
	var last string
	if j, err := e.client.Job(e.ctx, "order", "1001", "unshipped"); err == nil {
		last = j.LastError
	} else {
		last = e.finished("unshipped", "1001").LastError
	}
	for _, w := range []string{"placed_at", "outside the supported range", "Julian day", "milliseconds"} {
		if !strings.Contains(last, w) {
			t.Errorf("anchor 1e18: last error %q does not contain %q", last, w)
		}
	}
}

// Two stages further apart than the check's horizon: after the first, the
// check asks for the horizon, again and again, until the second is due.
func TestStagesFurtherApartThanTheHorizon(t *testing.T) {
	d := openDB(t, sqlcheck.SQLite)
	spec := sqlcheck.Spec{
		Name: "late", Entity: "order",
		Query:  `SELECT id AS key, placed_at FROM orders WHERE id IN (SELECT value FROM json_each($1)) AND status = 'unshipped'`,
		Anchor: "placed_at",
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.placed"}, {After: 51 * time.Hour, Event: "order.late"}},
		Guards: guards.Limits{Horizon: 24 * time.Hour},
	}
	d.exec(`INSERT INTO orders (id, status, placed_at) VALUES ('1001', 'unshipped', $1)`, epoch.Format("2006-01-02 15:04:05"))
	e := d.newEngine(spec)
	slot := epoch.Add(15 * time.Minute)
	e.schedule("late", "1001", slot)
	for _, want := range []time.Time{slot.Add(24 * time.Hour), slot.Add(48 * time.Hour), epoch.Add(51 * time.Hour)} {
		e.fire(slot, slot)
		if got := e.next("late", "1001"); !got.Equal(want) {
			t.Fatalf("after the check of %s: next check %s, want %s", slot, got, want)
		}
		if evs := d.events("late"); len(evs) != 1 {
			t.Fatalf("after the check of %s: raised %v, want the first stage only", slot, evs)
		}
		slot = want
	}
	e.fire(slot, slot)
	if evs := d.events("late"); len(evs) != 2 {
		t.Errorf("at the second stage: raised %v, want both stages", evs)
	}
}
