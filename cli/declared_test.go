package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlcheck"
	"github.com/prescient-dev/prescient/sqlite"
)

// declaredYAML is a checks section watching the example's orders table,
// with where, the query's condition on the due keys, in the store's
// dialect.
func declaredYAML(where string) string {
	return `sinks:
  ops: {type: log}
checks:
  order_late:
    entity: order
    query: |
      SELECT id AS key, placed_at
      FROM orders
      WHERE ` + where + `
        AND status = 'unshipped'
    anchor: placed_at
    stages:
      - after: 3h
        event: order.unshipped
        severity: warning
      - after: 24h
        event: order.unshipped.escalated
        stage: escalated
        severity: critical
    awaits: [shipped]
    sinks: [ops]
    batch_size: 500
    guards: {runtime: 5s}
`
}

const (
	liteDue = "id IN (SELECT value FROM json_each($1))"
	pgDue   = "id = ANY($1)"
)

func TestDeclaredConfig(t *testing.T) {
	path := writeConfig(t, declaredYAML(liteDue)+"  order_pinged:\n    entity: order\n    query: SELECT id AS key FROM ${ORDERS} WHERE "+liteDue+"\n    stages: [{after: 0s, event: order.ping}]\n    sinks: [ops]\n")
	cfg, err := loadConfig(path, envOf(map[string]string{"ORDERS": "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := cfg.DeclaredChecks()
	want := []sqlcheck.Spec{
		{
			Name:   "order_late",
			Entity: "order",
			Query:  "SELECT id AS key, placed_at\nFROM orders\nWHERE " + liteDue + "\n  AND status = 'unshipped'\n",
			Anchor: "placed_at",
			Stages: []sqlcheck.Stage{
				{After: 3 * time.Hour, Event: "order.unshipped", Severity: "warning"},
				{After: 24 * time.Hour, Event: "order.unshipped.escalated", Name: "escalated", Severity: "critical"},
			},
			Awaits:    []string{"shipped"},
			Sinks:     []string{"ops"},
			BatchSize: 500,
		},
		{
			Name:   "order_pinged",
			Entity: "order",
			Query:  "SELECT id AS key FROM orders WHERE " + liteDue,
			Stages: []sqlcheck.Stage{{After: 0, Event: "order.ping"}},
			Sinks:  []string{"ops"},
		},
	}
	want[0].Guards.Runtime = 5 * time.Second
	if !reflect.DeepEqual(got, want) {
		t.Errorf("declared checks:\ngot  %+v\nwant %+v", got, want)
	}
	// $1 is kept in a query only.
	bad := writeConfig(t, "checks:\n  c:\n    entity: or$1der\n    query: SELECT 1\n    stages: [{after: 0s, event: e}]\n")
	if _, err := loadConfig(bad, noEnv); err == nil || !strings.Contains(err.Error(), ":3: a $ that starts no variable") {
		t.Errorf("$1 outside a query: %v, want the error at line 3", err)
	}
}

// TestDeclaredConfigErrors: what is wrong with a declared check is an error
// naming the file, the line and the key path.
func TestDeclaredConfigErrors(t *testing.T) {
	const head = "checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE id = ANY($1)\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"stages out of order", head + "    stages:\n      - {after: 3h, event: a}\n      - event: b\n        after: 1h\n",
			":8: checks.c.stages[1].after: 1h0m0s is not after the stage before it (3h0m0s)"},
		{"stage without after", head + "    stages:\n      - event: a\n", ":6: checks.c.stages[0].after: is missing"},
		{"negative after", head + "    stages:\n      - {after: -1m, event: a}\n", ":6: checks.c.stages[0].after: -1m0s is negative"},
		{"no stages", head, ":2: checks.c.stages: is missing or empty"},
		{"empty stages", head + "    stages: []\n", ":5: checks.c.stages: is missing or empty"},
		{"no entity", "checks:\n  c:\n    query: SELECT 1\n    stages: [{after: 0s, event: a}]\n", ":2: checks.c.entity: is missing"},
		{"bad name", "checks:\n  bad name:\n    entity: order\n    query: q\n    stages: [{after: 0s, event: a}]\n", `:2: checks.bad name: invalid check name "bad name"`},
		{"bad event", head + "    stages: [{after: 0s, event: 'a b'}]\n", `:5: checks.c.stages[0].event: invalid event name "a b"`},
		{"two stages of one name", head + "    stages: [{after: 0s, event: a}, {after: 1h, event: a}]\n",
			`:5: checks.c.stages[1].event: stage name "a" is already used by stages[0]`},
		{"unknown key", head + "    stages: [{after: 0s, event: a}]\n    anchr: placed_at\n", `:6: checks.c.anchr: unknown key "anchr"`},
		{"batch size 0", head + "    stages: [{after: 0s, event: a}]\n    batch_size: 0\n", ":6: checks.c.batch_size: must be at least 1, got 0"},
		{"batch size past a page of due jobs", head + "    stages: [{after: 0s, event: a}]\n    batch_size: 1000000\n",
			":6: checks.c.batch_size: must be at most 10000 (a server lists at most that many due jobs at a time, so no query is run for more), got 1000000"},
		{"runtime too short", head + "    stages: [{after: 0s, event: a}]\n    guards: {runtime: 5ms}\n", ":6: checks.c.guards.runtime: must be at least 10ms"},
		{"horizon 0", head + "    stages: [{after: 0s, event: a}]\n    guards:\n      horizon: 0s\n", ":7: checks.c.guards.horizon: must be positive"},
		// Stages further apart than the horizon are reached one horizon at a
		// time, each check counted against max_checks (found by a review).
		{"stages beyond max_checks at the horizon's pace", head + "    anchor: placed_at\n    stages: [{after: 0s, event: a}, {after: 100h, event: b}]\n" +
			"    guards: {horizon: 24h, max_checks: 3}\n", ":6: checks.c.stages[1].after: is reached at the job's check 6 at the earliest (each check asks " +
			"for the next stage, or 24h0m0s (checks.c.guards.horizon) ahead at most, rounded up to the slots): more than checks.c.guards.max_checks (3), " +
			"so its jobs would end guard_max_checks first"},
		{"stages beyond the server's max_checks", "guards: {horizon: 1h}\n" + head + "    stages: [{after: 3h, event: a}, {after: 168h, event: b}]\n",
			":6: checks.c.stages[1].after: is reached at the job's check 169 at the earliest (each check asks for the next stage, or 1h0m0s (guards.horizon) " +
				"ahead at most, rounded up to the slots): more than guards.max_checks (100)"},
		{"sink not configured", head + "    stages: [{after: 0s, event: a}]\n    sinks: [ops]\n", `:6: checks.c.sinks[0]: no sink named "ops" is configured (configured: none)`},
		// Its events would be recorded and never delivered, nor later
		// when a sink is added (found by an operator's trial).
		{"no sinks", "sinks: {ops: {type: log}}\n" + head + "    stages: [{after: 0s, event: a}, {after: 1h, event: b}, {after: 2h, event: a, stage: again}]\n",
			`:3: checks.c.sinks: is missing: the check's stages raise events (a, b), which would be recorded and never delivered; name the sinks they go to (configured: ops), or write sinks: []`},
		{"await twice", head + "    stages: [{after: 0s, event: a}]\n    awaits: [shipped, shipped]\n", `:6: checks.c.awaits[1]: "shipped" is listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.yaml)
			cfg, err := loadConfig(path, noEnv)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), path+tt.want) {
				t.Fatalf("error %v, want one containing %q", err, path+tt.want)
			}
		})
	}
}

// TestDeclaredStagePastRange: a stage whose after, counted from now, is past
// the supported range of check times is refused at its key and line, as
// --in is (found by a trial of bad input: after: 2000000h was accepted with
// max_checks: -1, and with the default guards refused with advice to raise
// them, which could not help).
func TestDeclaredStagePastRange(t *testing.T) {
	const ladder = "checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE id = ANY($1)\n    sinks: []\n" +
		"    stages:\n      - {after: 3h, event: a}\n      - {after: 2000000h, event: b}\n"
	for _, guards := range []string{"", "guards: {max_checks: -1}\n", "guards: {horizon: -1}\n"} {
		path := writeConfig(t, ladder+guards)
		cfg, err := loadConfig(path, noEnv)
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Fatalf("%q: no error", guards)
		}
		for _, want := range []string{path + ":8: checks.c.stages[1].after: 2000000h0m0s from a job anchored now reaches ",
			"past the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z): its jobs would end guard_horizon instead of raising the stage"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %v, want one containing %q", guards, err, want)
			}
		}
		if strings.Contains(err.Error(), "guard_max_checks") {
			t.Errorf("%q: error %v advises raising a guard, which cannot help", guards, err)
		}
	}
	// Within the range, the same ladder is no error of range.
	path := writeConfig(t, strings.Replace(ladder, "2000000h", "876000h", 1)+"guards: {max_checks: -1}\n")
	cfg, err := loadConfig(path, noEnv)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Errorf("a stage 100 years off: %v", err)
	}
}

// runAt runs a command as main does, with the order example's Go check and
// the clock stopped at now.
func runAt(t *testing.T, ctx context.Context, now time.Time, env map[string]string, config string, args ...string) (string, string, error) {
	t.Helper()
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		t.Fatal(err)
	}
	var o, e syncBuffer
	root := NewRootCommand(&Opts{Checks: reg, Out: &o, Err: &e, lookupEnv: envOf(env), Now: func() time.Time { return now }})
	root.SetArgs(append([]string{"--config", config}, args...))
	err := root.ExecuteContext(ctx)
	return o.String(), e.String(), err
}

// declaredStore is a database for the CLI tests of declared checks: the
// configuration file's head, the environment, and how to run SQL in it.
type declaredStore struct {
	head string
	env  map[string]string
	exec func(q string, args ...any)
	// query returns the first column of the rows of q, as text.
	query func(q string) []string
	// payload casts the outbox's payload to text.
	payload string
}

func forDeclaredStores(t *testing.T, fn func(t *testing.T, s *declaredStore, due string)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "prescient.db")
		st, err := sqlite.Open(context.Background(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		s := &declaredStore{head: "database:\n  path: " + path + "\n", env: map[string]string{}, payload: "payload"}
		s.exec = func(q string, args ...any) {
			t.Helper()
			if _, err := st.DB().Exec(q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s.query = func(q string) []string {
			t.Helper()
			rows, err := st.DB().Query(q)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
			return out
		}
		fn(t, s, liteDue)
	})
	t.Run("postgres", func(t *testing.T) {
		url, schema := pgtest.Schema(t)
		st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		s := &declaredStore{head: "database:\n  schema: " + schema + "\n", env: map[string]string{EnvDatabaseURL: url}, payload: "payload::text"}
		s.exec = func(q string, args ...any) {
			t.Helper()
			if _, err := st.Pool().Exec(context.Background(), q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		s.query = func(q string) []string {
			t.Helper()
			rows, err := st.Pool().Query(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var out []string
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
			return out
		}
		fn(t, s, pgDue)
	})
}

// TestDeclaredEndToEnd: a check declared in the configuration is known to
// every command that builds a client: migrate records it in the catalog,
// schedule knows it, sweep runs it (its event recorded in the outbox with
// a delivery to its sink), resolve settles it by the event it awaits, and
// checks --prepare shows its prepared query; on both stores.
func TestDeclaredEndToEnd(t *testing.T) {
	forDeclaredStores(t, func(t *testing.T, s *declaredStore, due string) {
		ctx := context.Background()
		config := writeConfig(t, s.head+declaredYAML(due))
		t0 := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
		run := func(now time.Time, args ...string) (string, string) {
			t.Helper()
			out, errOut, err := runAt(t, ctx, now, s.env, config, args...)
			if err != nil {
				t.Fatalf("prescient %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
			}
			return out, errOut
		}
		run(t0, "migrate")
		s.exec(orders.Schema)
		s.exec(`INSERT INTO orders (id, status, placed_at) VALUES ('42', 'unshipped', $1), ('43', 'shipped', $1)`, t0.UTC())

		for _, id := range []string{"42", "43"} {
			_, errOut := run(t0, "schedule", "order", id, "order_late", "--in", "3h", "--require-known-check")
			if strings.Contains(errOut, "warning") {
				t.Errorf("schedule of the declared check warned: %s", errOut)
			}
		}
		out, _ := run(t0.Add(3*time.Hour+20*time.Minute), "sweep", "--mode", "run")
		wantContains(t, "sweep", out, "checked 2 job(s)")
		events := s.query(`SELECT entity_key || ' ' || event || ' ' || stage || ' ' || severity || ' ' || ` + s.payload + ` FROM prescient_outbox ORDER BY id`)
		wantEvent := `42 order.unshipped order.unshipped warning {"placed_at": "2025-06-01T12:00:00Z"}`
		if len(events) != 1 || strings.ReplaceAll(events[0], `":"`, `": "`) != wantEvent {
			t.Errorf("events after the sweep: %q, want %q", events, wantEvent)
		}
		if got := s.query(`SELECT sink || ' ' || state FROM prescient_deliveries`); !reflect.DeepEqual(got, []string{"ops pending"}) {
			t.Errorf("deliveries: %q, want one pending to ops", got)
		}
		out, _ = run(t0.Add(4*time.Hour), "resolve", "order", "42", "shipped")
		wantContains(t, "resolve", out, "resolved 1 job(s)")
		out, _ = run(t0.Add(4*time.Hour), "history", "--json")
		var recs []struct{ Key, Outcome string }
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatalf("history --json: %v\n%s", err, out)
		}
		got := map[string]string{}
		for _, r := range recs {
			got[r.Key] = r.Outcome
		}
		if want := map[string]string{"42": "resolved", "43": "done"}; !reflect.DeepEqual(got, want) {
			t.Errorf("history: %v, want %v", got, want)
		}
		out, _ = run(t0, "checks", "--prepare")
		wantContains(t, "checks --prepare", out, "order_late       sql   order   shipped  ops    500", "prepared: returns key, placed_at")
		if !strings.HasPrefix(out, "database: ") {
			t.Errorf("checks --prepare does not start with the database it prepared against:\n%s", out)
		}
	})
}

// logSink ends a configuration whose last key is a declared check's: the
// check's events go to a sink in the log.
const logSink = "    sinks: [ops]\nsinks: {ops: {type: log}}\n"

// TestDeclaredQueryErrors: a query the database refuses is an error at
// start-up naming the check, the key and its line: run stops at once
// instead of retrying, and so does every command that could run a check;
// a command that runs none still works, reading (status) or writing: an
// application's migration that renames a column must not leave operators
// unable to schedule, cancel or resolve.
func TestDeclaredQueryErrors(t *testing.T) {
	forDeclaredStores(t, func(t *testing.T, s *declaredStore, due string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s.exec(orders.Schema)
		if _, _, err := runAt(t, ctx, time.Now(), s.env, writeConfig(t, s.head), "migrate"); err != nil {
			t.Fatal(err)
		}
		yaml := s.head + "checks:\n  c:\n    entity: order\n    query: |\n      SELECT id AS key,\n        placd_at\n      FROM orders WHERE " + due + "\n    stages: [{after: 1h, event: e}]\n" + logSink
		config := writeConfig(t, yaml)
		line := strings.Count(s.head, "\n") + 4
		want := fmt.Sprintf("%s:%d: checks.c.query: prepare: ", config, line)
		for _, args := range [][]string{{"run"}, {"sweep"}, {"checks", "--prepare"}} {
			_, _, err := runAt(t, ctx, time.Now(), s.env, config, args...)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "placd_at") {
				t.Errorf("prescient %s: %v; want an error containing %q naming placd_at", strings.Join(args, " "), err, want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("prescient %s: %T, want a *ConfigError", strings.Join(args, " "), err)
			}
		}
		if ctx.Err() != nil {
			t.Fatal("run kept retrying a query the database refuses")
		}
		// sweep --mode reslot runs no check either (found by a review: it
		// prepared every query).
		for _, args := range [][]string{{"status"}, {"schedule", "order", "1", "order_unshipped", "--in", "1h"},
			{"resolve", "order", "1", "shipped"}, {"cancel", "order", "1"}, {"sweep", "--mode", "reslot"}} {
			if _, _, err := runAt(t, ctx, time.Now(), s.env, config, args...); err != nil {
				t.Errorf("prescient %s with a refused query: %v, want it to work (it runs no check)", strings.Join(args, " "), err)
			}
		}
		// A declared check may not take a Go check's name.
		config = writeConfig(t, s.head+"checks:\n  order_unshipped:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE "+due+"\n    stages: [{after: 1h, event: e}]\n"+logSink)
		_, _, err := runAt(t, ctx, time.Now(), s.env, config, "schedule", "order", "1", "order_unshipped", "--in", "1h")
		if err == nil || !strings.Contains(err.Error(), "checks.order_unshipped: this binary has a Go check named order_unshipped") {
			t.Errorf("a declared check named as a Go check: %v", err)
		}
		// So do the two commands that validate the configuration without
		// the database (found by a new user's trial: checks listed both
		// and slots said "configuration OK").
		for _, args := range [][]string{{"checks"}, {"checks", "--json"}, {"slots"}, {"slots", "--json"}} {
			_, _, err := runAt(t, ctx, time.Now(), s.env, config, args...)
			if err == nil || !strings.Contains(err.Error(), "checks.order_unshipped: this binary has a Go check named order_unshipped") {
				t.Errorf("prescient %s with a declared check named as a Go check: %v", strings.Join(args, " "), err)
			}
		}
		// A query that does not use $1 is refused when the configuration is
		// read, by every command (found by a new user's trial: only run and
		// checks --prepare said so; migrate recorded it in the catalog and
		// schedule created its jobs).
		config = writeConfig(t, s.head+"checks:\n  extrakey:\n    entity: order\n    query: SELECT 'zzz' AS key\n    stages: [{after: 1h, event: e}]\n"+logSink)
		want = fmt.Sprintf("%s:%d: checks.extrakey.query: does not use $1", config, strings.Count(s.head, "\n")+4)
		for _, args := range [][]string{{"checks"}, {"slots"}, {"schedule", "order", "1", "extrakey", "--in", "1h"}} {
			_, _, err := runAt(t, ctx, time.Now(), s.env, config, args...)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("prescient %s with a query that does not use $1: %v; want an error containing %q", strings.Join(args, " "), err, want)
			}
		}
	})
}

// TestChecksCommand lists the binary's Go checks and the declared ones, in
// text and JSON, without touching the database.
func TestChecksCommand(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "never.db")
	config := writeConfig(t, "database:\n  path: "+dbPath+"\nguards: {max_checks: 7}\n"+declaredYAML(liteDue))
	out, _, err := runAt(t, context.Background(), time.Now(), map[string]string{}, config, "checks")
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "checks", out,
		"CHECK            KIND  ENTITY  AWAITS   SINKS  BATCH  MAX CHECKS  RUNTIME  HORIZON\n",
		"order_late       sql   order   shipped  ops    500    7           5s*      2160h0m0s\n",
		"order_unshipped  go    -       shipped  -      -      7           30s      2160h0m0s\n",
		"order_late: entity order, stages counted from column placed_at\n",
		"  24h0m0s  order.unshipped.escalated  critical  escalated\n",
		"    WHERE "+liteDue+"\n")
	if _, err := os.Stat(dbPath); err == nil {
		t.Error("checks without --prepare created the database")
	}
	out, _, err = runAt(t, context.Background(), time.Now(), map[string]string{}, config, "checks", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list []checkInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("checks --json: %v\n%s", err, out)
	}
	if len(list) != 2 || list[0].Name != "order_late" || list[0].Kind != "sql" || list[0].BatchSize != 500 ||
		!reflect.DeepEqual(list[0].Guards, guardsInfo{MaxChecks: 7, Runtime: "5s", Horizon: "2160h0m0s", Own: []string{"runtime"}}) ||
		len(list[0].Stages) != 2 || list[0].Stages[1] != (stageInfo{After: "24h0m0s", Event: "order.unshipped.escalated", Stage: "escalated", Severity: "critical"}) ||
		list[1].Name != "order_unshipped" || list[1].Kind != "go" || !reflect.DeepEqual(list[1].Awaits, []string{"shipped"}) {
		t.Errorf("checks --json: %+v", list)
	}
}

// A declared check may have its events only recorded, for an application
// that reads prescient_outbox itself, when it says so: sinks: [].
func TestDeclaredWithSinksWrittenEmptyLoads(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, "checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE id = ANY($1)\n"+
		"    stages: [{after: 0s, event: a}]\n    sinks: []\n"), noEnv)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Fatalf("a declared check with sinks: []: %v, want it loaded", err)
	}
	if got := cfg.DeclaredChecks(); len(got) != 1 || len(got[0].Sinks) != 0 {
		t.Errorf("declared checks: %+v, want c with no sinks", got)
	}
}

// Stages further apart than the horizon load: the check asks for the
// horizon and looks again then. (They were refused while a check asked for
// the next stage's time whatever the horizon, and its job ended
// guard_horizon there.)
func TestDeclaredStagesFurtherApartThanTheHorizonLoad(t *testing.T) {
	const head = "checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE id = ANY($1)\n"
	for _, body := range []string{
		"guards: {horizon: 48h}\n" + head + "    anchor: placed_at\n    stages: [{after: 3h, event: a}, {after: 52h, event: b}]\n",
		head + "    stages: [{after: 3h, event: a}, {after: 4h, event: b}]\n    guards: {horizon: 2h}\n",
		// The engine rounds slot+horizon up to the grid: on 15m slots a 20m
		// horizon moves a job 30m at a time, so 0s and 60m take 3 checks
		// (at first counted as 4 and refused; found by a review).
		"slots: {resolution: 15m}\n" + head + "    anchor: placed_at\n    stages: [{after: 0s, event: a}, {after: 60m, event: b}]\n    guards: {horizon: 20m, max_checks: 3}\n",
		// Each check asks for the next stage when it is within the horizon,
		// and jumps to the slot that rounds up to: 0s, 35m, 70m on 15m slots
		// with a 20m horizon are checked at 0, 30m, 45m and 75m; 0s, 5m, 10m
		// at 0 and 15m (at first counted by gaps, 5 and 3, and refused).
		"slots: {resolution: 15m}\n" + head + "    anchor: placed_at\n    stages: [{after: 0s, event: a}, {after: 35m, event: b}, {after: 70m, event: c}]\n    guards: {horizon: 20m, max_checks: 4}\n",
		"slots: {resolution: 15m}\n" + head + "    anchor: placed_at\n    stages: [{after: 0s, event: a}, {after: 5m, event: b}, {after: 10m, event: c}]\n    guards: {horizon: 15m, max_checks: 2}\n",
	} {
		cfg, err := loadConfig(writeConfig(t, body+logSink), noEnv)
		if err == nil {
			err = cfg.Validate() // loadConfig alone does not judge the checks section
		}
		if err != nil {
			t.Errorf("load\n%s: %v", body, err)
		}
	}
}

// A declared check is scheduled for its own entity only: a typo (orders
// for order) is refused, naming both, rather than a job that could only
// fail, raising no alert (found by an operator's trial).
func TestDeclaredCheckRefusesAnotherEntity(t *testing.T) {
	forDeclaredStores(t, func(t *testing.T, s *declaredStore, due string) {
		ctx := context.Background()
		s.exec(orders.Schema)
		config := writeConfig(t, s.head+"checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE "+due+
			"\n    stages: [{after: 1h, event: e}]\n"+logSink)
		if _, _, err := runAt(t, ctx, time.Now(), s.env, config, "migrate"); err != nil {
			t.Fatal(err)
		}
		// The catalog says so, for prescient_schedule in SQL (see the
		// postgres package's TestSQLScheduleRefusesAnotherEntityThanTheChecks).
		if got := s.query("SELECT entity FROM prescient_catalog WHERE check_name = 'c'"); !slices.Equal(got, []string{"order"}) {
			t.Errorf("catalog entity of c: %v, want order", got)
		}
		_, _, err := runAt(t, ctx, time.Now(), s.env, config, "schedule", "orders", "1", "c", "--in", "1h")
		if err == nil || !strings.Contains(err.Error(), "check c watches entity order only") {
			t.Errorf("schedule a declared check of entity order for entity orders: %v, want it refused", err)
		}
		if got := s.query("SELECT entity FROM prescient_jobs"); len(got) != 0 {
			t.Errorf("jobs scheduled: %v, want none", got)
		}
		if _, _, err := runAt(t, ctx, time.Now(), s.env, config, "schedule", "order", "1", "c", "--in", "1h"); err != nil {
			t.Errorf("schedule it for entity order: %v", err)
		}
	})
}
