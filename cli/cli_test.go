package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// syncBuffer is a bytes.Buffer safe to write from a running server while
// the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness runs commands the way main does, with a registry holding the
// order example, the environment env and the config file path (if any).
type harness struct {
	t      *testing.T
	env    map[string]string
	config string
}

func (h *harness) run(args ...string) (string, error) {
	h.t.Helper()
	out, _, err := h.runCtx(context.Background(), args...)
	return out, err
}

func (h *harness) runCtx(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		h.t.Fatal(err)
	}
	var o, e syncBuffer
	root := NewRootCommand(&Opts{Checks: reg, Out: &o, Err: &e, lookupEnv: envOf(h.env)})
	if h.config != "" {
		args = append([]string{"--config", h.config}, args...)
	}
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return o.String(), e.String(), err
}

func (h *harness) mustRun(args ...string) string {
	h.t.Helper()
	out, err := h.run(args...)
	if err != nil {
		h.t.Fatalf("prescient %s: %v\noutput:\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: output does not contain %q:\n%s", what, w, got)
		}
	}
}

// dbHarness gives a test its own schema and a config file pointing at it.
func dbHarness(t *testing.T, extra string) (*harness, string, string) {
	url, schema := pgtest.SchemaName(t)
	path := writeConfig(t, fmt.Sprintf("database:\n  schema: %s\n%s", schema, extra))
	return &harness{t: t, env: map[string]string{EnvDatabaseURL: url}, config: path}, url, schema
}

// TestEmbeddedDefault runs the commands with no database configured: they
// use the SQLite file at database.path, which migrate creates.
func TestEmbeddedDefault(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "jobs.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+db+"\n")}
	wantContains(t, "migrate", h.mustRun("migrate"), "database: sqlite file "+db+"\n", "migrated;")
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("migrate did not create the SQLite file: %v", err)
	}
	h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	wantContains(t, "status", h.mustRun("status"), "order_unshipped")
	h.mustRun("sweep")
	wantContains(t, "cancel", h.mustRun("cancel", "order", "1"), "1")
	wantContains(t, "history", h.mustRun("history"), "cancelled")
}

// TestSQLiteRefusesWhatItCannotDo: PostgreSQL-only settings without a
// database.url are errors naming the key and saying what would be right.
func TestSQLiteRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, key, want string }{
		{"database:\n  schema: jobs\n", "database.schema", "PostgreSQL only"},
		{"database:\n  max_conns: 4\n", "database.max_conns", "PostgreSQL only"},
		{"ownership:\n  auto: true\n", "ownership.auto", "several hosts"},
		{"database:\n  path: \"\"\n", "database.path", "is empty"},
	} {
		h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, tc.yaml)}
		_, err := h.run("slots")
		if err == nil || !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %s and saying %q", tc.yaml, err, tc.key, tc.want)
		}
		// With PostgreSQL the same setting is fine.
		h.env[EnvDatabaseURL] = "postgres://app@db:5432/app"
		if tc.key != "database.path" {
			if _, err := h.run("slots"); err != nil {
				t.Errorf("%q with a database.url: %v", tc.yaml, err)
			}
		}
	}
}

func TestFlagErrors(t *testing.T) {
	h := &harness{t: t, env: map[string]string{}}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"schedule", "order", "1", "c"}, []string{"--at", "--in"}},
		{[]string{"schedule", "order", "1", "c", "--at", "tomorrow"}, []string{`--at "tomorrow"`, "RFC 3339"}},
		{[]string{"schedule", "order", "1", "c", "--at", "2025-06-01 10:00"}, []string{`--at "2025-06-01 10:00"`, "RFC 3339"}},
		{[]string{"schedule", "order", "1", "c", "--in", "3 hours"}, []string{`--in "3 hours"`, "Go duration"}},
		// Written as RFC 3339 says, but no real time: says which part.
		{[]string{"schedule", "order", "1", "c", "--at", "2030-02-30T10:00:00Z"}, []string{`--at "2030-02-30T10:00:00Z" is no real time: day out of range`}},
		{[]string{"schedule", "order", "1", "c", "--at", "2030-06-01T10:00:00+25:00"}, []string{"is no real time: time zone offset hour out of range"}},
		{[]string{"schedule", "order", "1", "c", "--in", "-1h"}, []string{`--in "-1h"`, "of 0 or more"}},
		{[]string{"schedule", "order", "1", "c", "--in", "1h", "--at", "2025-06-01T10:00:00Z"}, []string{"only one"}},
		{[]string{"schedule", "order", "1", "c", "--in", "1h", "--payload", "{amount: 3}"}, []string{`--payload "{amount: 3}"`, "not valid JSON"}},
		{[]string{"schedule", "order", "1", "c", "--in", "1h", "--on-conflict", "merge"}, []string{`--on-conflict "merge"`, "replace or keep"}},
		{[]string{"schedule", "order", "1"}, []string{"expected ENTITY KEY CHECK", "missing CHECK"}},
		{[]string{"sweep", "--mode", "now"}, []string{"--mode", `"now"`, "reslot"}},
		{[]string{"history", "--outcome", "lost"}, []string{"--outcome", `"lost"`, "resolved"}},
		{[]string{"history", "--since", "yesterday"}, []string{`--since "yesterday"`, "RFC 3339", "24h"}},
		{[]string{"history", "--since", "2030-04-31T00:00:00Z"}, []string{`--since "2030-04-31T00:00:00Z" is no real time: day out of range`}},
		{[]string{"history", "--key", "42"}, []string{`--key "42" needs --entity`}},
		// Go's zero time meant "no flag" (found by a trial of time): --at
		// took it for now, --until for no bound, --slot for every slot.
		{[]string{"schedule", "order", "1", "c", "--at", "0001-01-01T00:00:00Z"}, []string{`--at "0001-01-01T00:00:00Z" is outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)`}},
		{[]string{"reschedule", "order", "1", "c", "--at", "0001-01-01T01:00:00+01:00"}, []string{`--at "0001-01-01T01:00:00+01:00" is outside the supported range`}},
		{[]string{"retry", "--check", "c", "--at", "0001-01-01T00:00:00Z"}, []string{`--at "0001-01-01T00:00:00Z" is outside the supported range`}},
		{[]string{"history", "--until", "0001-01-01T00:00:00Z"}, []string{`--until "0001-01-01T00:00:00Z" is outside the supported range`}},
		{[]string{"history", "--since", "2200-01-01T00:00:00Z"}, []string{`--since "2200-01-01T00:00:00Z" is outside the supported range`}},
		{[]string{"jobs", "list", "--slot", "0001-01-01T00:00:00Z"}, []string{`--slot "0001-01-01T00:00:00Z" is outside the supported range`}},
		{[]string{"history", "--limit", "-3"}, []string{"--limit -3"}},
		{[]string{"history", "--since", "1h", "--until", "2h"}, []string{`--since "1h"`, `is not before --until "2h"`, "--since takes the longer one"}},
		{[]string{"history", "--since", "2026-11-27T00:00:00Z", "--until", "2026-11-26T00:00:00Z"}, []string{`is not before --until "2026-11-26T00:00:00Z" (2026-11-26T00:00:00Z)`}},
		{[]string{"schedule", "order", "1", "c", "--in", "1h", "--payload", ""}, []string{"--payload is empty", "leave --payload out"}},
		{[]string{"status", "--upcoming", "0"}, []string{"--upcoming 0"}},
		{[]string{"--config", "/nonexistent/prescient.yaml", "slots"}, []string{"/nonexistent/prescient.yaml"}},
	}
	for _, tt := range tests {
		_, err := h.run(tt.args...)
		if err == nil {
			t.Errorf("prescient %s: no error, want one containing %q", strings.Join(tt.args, " "), tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("prescient %s: error %q does not contain %q", strings.Join(tt.args, " "), err, w)
			}
		}
	}
}

func TestSlotsCommand(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		want    []string
		notWant []string
		wantErr string
	}{
		{"defaults", "", []string{
			"resolution 15m0s, offset 0s, cycle 1h0m0s: 4 position(s)",
			"positions: 0 :00, 1 :15, 2 :30, 3 :45",
			"every server (no static ownership)", "configuration OK"}, []string{"warning"}, ""},
		{"static map with an overlap", "slots: {resolution: 6h, cycle: 24h}\nownership:\n  static:\n    a: [0, 1]\n    b: [1, 2, 3]\n", []string{
			"positions: 0 00:00, 1 06:00, 2 12:00, 3 18:00",
			"1         06:00   a, b",
			"warning: position 1 (06:00) is fired by 2 servers: a, b", "configuration OK"}, nil, ""},
		{"server not in the map", "server: c\nownership:\n  static:\n    a: [0, 1]\n    b: [2, 3]\n", []string{
			`warning: this configuration's server name, "c" (server, PRESCIENT_SERVER or the host name), is not in ownership.static`,
			"configuration OK"}, nil, ""},
		{"server in the map", "server: b\nownership:\n  static:\n    a: [0, 1]\n    b: [2, 3]\n", []string{"configuration OK"}, []string{"warning"}, ""},
		// An invalid configuration prints its errors, every one, and no
		// table: after one, they read as a footnote.
		{"unowned position", "ownership:\n  static:\n    a: [0, 1]\n    b: [3]\n", nil, []string{"positions", "POSITION", "configuration OK"},
			"ownership.static: position has no owner: position(s) [2]"},
		// 360 positions printed one per row, and 360 on one line (found by
		// an operator's trial): the fine grid's runs, one row each.
		{"fine grid", "slots: {resolution: 10s}\n", []string{
			"positions: 0 :00:00, 1 :00:10, 2 :00:20, …, 359 :59:50 (one every 10s)\n",
			"0-359     :00:00-:59:50  every server (no static ownership)\n", "configuration OK"}, []string{"4 :00:40", "\n1 "}, ""},
		{"fine grid, static map", "slots: {resolution: 1m}\nownership:\n  static:\n    a: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]\n    b: [30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]\n", []string{
			"0-29      :00-:29  a\n30-59     :30-:59  b\n", "configuration OK"}, nil, ""},
		{"invalid grid", "slots:\n  resolution: 15m\n  cycle: 50m\n", nil, []string{"positions"}, ":3: slots.cycle:"},
		{"other invalid key", "log:\n  format: xml\n", nil, []string{"positions", "POSITION", "configuration OK"}, ":2: log.format"},
		{"several invalid keys", "workers: 0\nlog:\n  format: xml\n", nil, []string{"positions", "POSITION", "configuration OK"},
			":1: workers: must be at least 1, got 0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &harness{t: t, env: map[string]string{}}
			if tt.config != "" {
				h.config = writeConfig(t, tt.config)
			}
			out, err := h.run("slots")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v, want none; output:\n%s", err, out)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q; output:\n%s", err, tt.wantErr, out)
			}
			wantContains(t, "slots", out, tt.want...)
			for _, nw := range tt.notWant {
				if strings.Contains(out, nw) {
					t.Errorf("output contains %q:\n%s", nw, out)
				}
			}
			if tt.wantErr != "" && out != "" {
				t.Errorf("output beside the error:\n%s", out)
			}
			if tt.name == "several invalid keys" && !strings.Contains(fmt.Sprint(err), ":3: log.format") {
				t.Errorf("error %v does not report log.format too", err)
			}
		})
	}
}

func TestJobCommands(t *testing.T) {
	h, url, schema := dbHarness(t, "")
	wantContains(t, "migrate", h.mustRun("migrate"), "database: postgres ", "schema "+schema+"\n", "migrated;", "slot grid every 15m0s")

	out := h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T10:07:00Z")
	wantContains(t, "schedule --at", out, "order/42 order_unshipped: created; next check in slot 2030-01-01T10:15:00Z (position 1, :15)")
	// keep leaves the pending job where it is; replace moves it. Each says
	// which it did.
	out = h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T11:00:00+01:00", "--on-conflict", "keep")
	wantContains(t, "schedule --on-conflict keep", out, "already pending, kept as it was (--on-conflict keep); next check in slot 2030-01-01T10:15:00Z")
	out = h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T12:00:00+01:00")
	wantContains(t, "schedule replace", out, "already pending, replaced; next check in slot 2030-01-01T11:00:00Z (position 0, :00)")
	created := func(args ...string) *bool {
		t.Helper()
		var sj struct {
			Created *bool `json:"created"`
		}
		if err := json.Unmarshal([]byte(h.mustRun(append(append([]string{"schedule"}, args...), "--json")...)), &sj); err != nil {
			t.Fatal(err)
		}
		return sj.Created
	}
	if c := created("order", "42", "order_unshipped", "--at", "2030-01-01T12:00:00+01:00", "--on-conflict", "keep"); c == nil || *c {
		t.Errorf("schedule of a pending job --json: created %v, want false", c)
	}
	before := time.Now()
	out = h.mustRun("schedule", "order", "43", "order_unshipped", "--in", "2h", "--payload", `{"amount": 12}`)
	slot := prescient.Config{}.WithDefaults().Grid.Ceil(before.Add(2 * time.Hour))
	if !strings.Contains(out, slot.Format(time.RFC3339)) && !strings.Contains(out, slot.Add(15*time.Minute).Format(time.RFC3339)) {
		t.Errorf("schedule --in 2h at %s: output %q does not name slot %s", before.Format(time.RFC3339), out, slot.Format(time.RFC3339))
	}
	if c := created("payout", "7", "payout_unconfirmed", "--in", "24h"); c == nil || !*c {
		t.Errorf("schedule of a new job --json: created %v, want true", c)
	}

	// An overdue job, as a server that was down would leave behind.
	st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	past := time.Date(2020, 1, 1, 9, 0, 0, 0, time.UTC)
	if _, err := st.JobSchedule(context.Background(), nil, []*driver.JobScheduleParams{{
		Entity: "order", Key: "1", Check: "order_unshipped", At: past, OnConflict: prescient.ConflictReplace, Now: past,
	}}); err != nil {
		t.Fatal(err)
	}

	var st1 prescient.Status
	if err := json.Unmarshal([]byte(h.mustRun("status", "--json", "--upcoming", "2")), &st1); err != nil {
		t.Fatalf("status --json: %v", err)
	}
	if st1.Jobs.Pending != 4 || st1.Jobs.Overdue != 1 || !st1.Jobs.OldestOverdue.Equal(past) ||
		st1.Jobs.ByCheck["order_unshipped"] != 3 || st1.Jobs.ByCheck["payout_unconfirmed"] != 1 || len(st1.Jobs.Upcoming) != 2 {
		t.Errorf("status --json: got %+v; want 4 pending, 1 overdue since %s, 3 order_unshipped + 1 payout_unconfirmed, 2 upcoming slots", st1.Jobs, past)
	}
	out = h.mustRun("status")
	wantContains(t, "status", out, "pending: 4", "overdue: 1, oldest due 2020-01-01T09:00:00Z", "order_unshipped     3",
		"2030-01-01T11:00:00Z", "history (24h): none")

	wantContains(t, "sweep", h.mustRun("sweep", "--mode", "reslot"), "sweep (reslot): moved 1 overdue job(s) to slot")
	wantContains(t, "sweep again", h.mustRun("sweep", "--mode", "reslot"), "moved 0 overdue job(s)")

	wantContains(t, "resolve", h.mustRun("resolve", "order", "42", "shipped"), "resolved 1 job(s)")
	wantContains(t, "resolve again", h.mustRun("resolve", "order", "42", "shipped"), "resolved 0 job(s)")
	// An event no check awaits is most likely misspelt: said on stderr,
	// not for an event some check awaits (found by an operator's trial).
	if _, stderr, err := h.runCtx(context.Background(), "resolve", "order", "42", "shipped"); err != nil || stderr != "" {
		t.Errorf("resolve an awaited event with nothing pending: %v, stderr %q; want no note", err, stderr)
	}
	stdout, stderr, err := h.runCtx(context.Background(), "resolve", "order", "42", "shiped")
	if err != nil || !strings.Contains(stdout, "resolved 0 job(s)") ||
		!strings.Contains(stderr, `note: no check awaits event "shiped" (the events checks await: `) || !strings.Contains(stderr, "shipped") {
		t.Errorf("resolve an event no check awaits: %v, stdout %q, stderr %q; want 0 resolved and a note naming the events awaited", err, stdout, stderr)
	}
	wantContains(t, "cancel one", h.mustRun("cancel", "order", "43", "order_unshipped"), "cancelled 1 job(s)")
	wantContains(t, "cancel entity", h.mustRun("cancel", "payout", "7"), "cancelled 1 job(s)")
	wantContains(t, "cancel missing", h.mustRun("cancel", "order", "99"), "cancelled 0 job(s)")
	// A check no one knows is most likely misspelt: said on stderr, not
	// for a known check with nothing pending (found by a new user's trial).
	if _, stderr, err := h.runCtx(context.Background(), "cancel", "order", "99", "order_unshipped"); err != nil || stderr != "" {
		t.Errorf("cancel a known check with nothing pending: %v, stderr %q; want no note", err, stderr)
	}
	stdout, stderr, err = h.runCtx(context.Background(), "cancel", "order", "42", "order_unshiped")
	if err != nil || !strings.Contains(stdout, "cancelled 0 job(s)") ||
		!strings.Contains(stderr, `note: no server runs a check named "order_unshiped" (known checks: `) || !strings.Contains(stderr, "order_unshipped") {
		t.Errorf("cancel a check no one knows: %v, stdout %q, stderr %q; want 0 cancelled and a note naming the checks known", err, stdout, stderr)
	}

	var recs []*history.Record
	if err := json.Unmarshal([]byte(h.mustRun("history", "--json")), &recs); err != nil {
		t.Fatalf("history --json: %v", err)
	}
	got := map[string]history.Outcome{}
	for _, r := range recs {
		got[r.Entity+"/"+r.Key] = r.Outcome
	}
	want := map[string]history.Outcome{"order/42": history.Resolved, "order/43": history.Cancelled, "payout/7": history.Cancelled}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("history --json: got %v, want %v", got, want)
	}
	out = h.mustRun("history", "--entity", "order", "--outcome", "cancelled", "--since", "1h")
	wantContains(t, "history --outcome cancelled", out, "FINISHED", "order   43   order_unshipped  cancelled")
	if strings.Contains(out, "resolved") || strings.Contains(out, "payout") {
		t.Errorf("history --entity order --outcome cancelled lists other records:\n%s", out)
	}
	wantContains(t, "history --until", h.mustRun("history", "--until", "2021-01-01T00:00:00Z"), "no history records match")
	wantContains(t, "history --json empty", h.mustRun("history", "--json", "--check", "nothing"), "[]")
	wantContains(t, "status after", h.mustRun("status"), "pending: 1", "overdue: 0", "history (24h): resolved 1, cancelled 2")
}

func TestRunCommand(t *testing.T) {
	h, url, schema := dbHarness(t, "server: runner-1\nslots: {resolution: 1s, cycle: 0s}\nlog: {format: json, level: info}\n")
	h.mustRun("migrate")
	st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		stderr string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, err := h.runCtx(ctx, "run")
		done <- result{stderr, err}
	}()
	// The server registers itself once started.
	deadline := time.Now().Add(20 * time.Second)
	for {
		servers, err := st.ServerList(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(servers) == 1 && servers[0].Name == "runner-1" {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			r := <-done
			t.Fatalf("server runner-1 did not register within 20s (servers %v); run returned %v, logs:\n%s", servers, r.err, r.stderr)
		}
		time.Sleep(50 * time.Millisecond) // polling the database for the server, not synchronising goroutines
	}
	wantContains(t, "status with a server", h.mustRun("status"), "runner-1")
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatalf("run: %v\nlogs:\n%s", r.err, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	var msgs []string
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("log line is not JSON (log.format: json): %q", l)
			continue
		}
		msgs = append(msgs, fmt.Sprint(rec["msg"]))
	}
	wantContains(t, "run logs", strings.Join(msgs, "|"), "started", "serving", "stopping", "stopped")
	if servers, _ := st.ServerList(context.Background()); len(servers) != 0 {
		t.Errorf("servers after run stopped: %v, want none", servers)
	}
}

// After `prescient migrate`, an application in another language can
// schedule and resolve through SQL alone: migrate recorded the grid and the
// catalog of which checks await which events, before any server started.
func TestMigrateThenSQLAlone(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	wantContains(t, "migrate", h.mustRun("migrate"), "1 check(s) recorded")
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var slot time.Time
	if err := st.Pool().QueryRow(ctx, `SELECT prescient_schedule('order', '42', 'order_unshipped', now() + interval '3 hours')`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT prescient_resolve('order', '42', 'shipped')`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("prescient_resolve = %d, %v; want 1", n, err)
	}
}

// The CLI's resolve adds the catalog entries of its own checks only where
// the store has none: the servers that run a check recorded which events it
// awaits, and a stock binary must not overwrite that.
func TestResolveKeepsTheServersCatalog(t *testing.T) {
	t.Parallel()
	h, url, schema := dbHarness(t, "")
	h.mustRun("migrate")
	st, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The cluster's order_unshipped awaits "delivered", not "shipped".
	if err := st.CatalogSave(context.Background(), []driver.CatalogEntry{{Check: "order_unshipped", Awaits: []string{"delivered"}}}); err != nil {
		t.Fatal(err)
	}
	h.mustRun("schedule", "order", "42", "order_unshipped", "--in", "3h")
	wantContains(t, "resolve shipped", h.mustRun("resolve", "order", "42", "shipped"), "resolved 0 job(s)")
	wantContains(t, "resolve delivered", h.mustRun("resolve", "order", "42", "delivered"), "resolved 1 job(s)")
}

// TestArgumentErrorsNameWhatIsMissing: a command with positional arguments
// says what it expects and what is missing or extra, not only how many.
func TestArgumentErrorsNameWhatIsMissing(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"resolve", "order", "1"}, "resolve: expected ENTITY KEY EVENT, got 2 arguments (missing EVENT)"},
		{[]string{"resolve"}, "resolve: expected ENTITY KEY EVENT, got no arguments (missing ENTITY KEY EVENT)"},
		{[]string{"resolve", "order", "1", "shipped", "now"}, `resolve: expected ENTITY KEY EVENT, got 4 arguments (1 too many: "now"; quote an argument that holds spaces)`},
		{[]string{"schedule", "order", "--in", "1h"}, "schedule: expected ENTITY KEY CHECK, got 1 argument (missing KEY CHECK)"},
		{[]string{"schedule", "order", "1", "order_unshipped", "x", "y", "--in", "1h"}, `schedule: expected ENTITY KEY CHECK, got 5 arguments (2 too many: "x" "y"; quote an argument that holds spaces)`},
		{[]string{"cancel", "order"}, "cancel: expected ENTITY KEY [CHECK], got 1 argument (missing KEY)"},
		{[]string{"cancel", "order", "1", "order_unshipped", "x"}, `cancel: expected ENTITY KEY [CHECK], got 4 arguments (1 too many: "x"; quote an argument that holds spaces)`},
		// `prescient cancel order 1 "$CHECK"` with CHECK unset must not
		// cancel every check of the order.
		{[]string{"cancel", "order", "1", ""}, "CHECK is empty: name the check to cancel, or leave CHECK out to cancel every pending check of the entity"},
	} {
		_, err := h.run(tt.args...)
		if err == nil || err.Error() != tt.want {
			t.Errorf("prescient %s: got %v, want %s", strings.Join(tt.args, " "), err, tt.want)
		}
	}
}

// TestListsRefuseAnEmptyFilter: a filter given empty (`--key "$KEY"` with
// KEY unset) is refused by every command that filters, as by retry and
// cancel; jobs list, jobs show, history and deliveries listed everything
// (found by a trial of bad input), and deliveries retry --sink "" queued
// every dead delivery again.
func TestListsRefuseAnEmptyFilter(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "list", "--entity", "order", "--key", ""}, "--key is empty: name the key, or leave --key out"},
		{[]string{"jobs", "list", "--check", ""}, "--check is empty"},
		{[]string{"jobs", "list", "--slot", ""}, "--slot is empty"},
		{[]string{"jobs", "show", "order", ""}, "KEY is empty: name the entity key"},
		{[]string{"jobs", "show", "", "1"}, "ENTITY is empty"},
		{[]string{"jobs", "show", "order", "1", ""}, "CHECK is empty: name the check, or leave CHECK out"},
		{[]string{"history", "--entity", "order", "--key", ""}, "--key is empty"},
		{[]string{"history", "--entity", ""}, "--entity is empty"},
		{[]string{"history", "--since", ""}, "--since is empty"},
		{[]string{"deliveries", "--sink", ""}, "--sink is empty"},
		{[]string{"deliveries", "--state", ""}, "--state is empty"},
		{[]string{"deliveries", "retry", "--sink", ""}, "--sink is empty: name the sink, or leave --sink out"},
		// Found by a review: a list flag's empty value, and retire's
		// --entity, which retired the check for every entity.
		{[]string{"history", "--outcome", ""}, "--outcome is empty"},
		{[]string{"checks", "retire", "order_unshipped", "--entity", ""}, "--entity is empty"},
	} {
		_, err := h.run(tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("prescient %q: %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
}

// TestRetryRefusesAnEmptyFilter: `prescient retry --check "$CHECK"` with
// CHECK unset must not widen to every failed job, as an empty CHECK must not
// for cancel.
func TestRetryRefusesAnEmptyFilter(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate")
	for _, args := range [][]string{{"--check", ""}, {"--entity", ""}, {"--entity", "order", "--key", ""}} {
		_, err := h.run(append([]string{"retry"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "is empty: name the") {
			t.Errorf("retry %q: %v, want an error saying the filter is empty", args, err)
		}
	}
}
