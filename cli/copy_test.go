package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// copyClock is a clock the test moves by hand.
type copyClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *copyClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *copyClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// copyGrid is the grid of the source the copy tests fill: 10-minute slots
// shifted by 2 minutes, so that a target left on the default grid would show.
var copyGrid = slots.Grid{Resolution: 10 * time.Minute, Offset: 2 * time.Minute, Cycle: time.Hour}

// fillSQLite builds, through a prescient.Client on a clock the test drives,
// a SQLite store at path holding pending jobs that escalated, failed and
// carry payloads, history of several outcomes and a catalog; it returns the
// store, open.
func fillSQLite(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Escalates: alert now, again in an hour.
	must(reg.Register("order_unshipped", func(_ context.Context, j *checks.Job) (time.Time, error) {
		return j.Slot.Add(time.Hour), nil
	}, &checks.Opts{Awaits: []string{"shipped"}}))
	// Fails for keys starting "bad", is done for the others.
	must(reg.Register("invoice_unpaid", func(_ context.Context, j *checks.Job) (time.Time, error) {
		if strings.HasPrefix(j.Key, "bad") {
			return time.Time{}, fmt.Errorf("ledger unreachable for %s", j.Key)
		}
		return time.Time{}, nil
	}, &checks.Opts{Awaits: []string{"paid", "voided"}}))
	// Asks for a time in the past: guard_past.
	must(reg.Register("signup_unverified", func(_ context.Context, j *checks.Job) (time.Time, error) {
		return j.Slot.Add(-time.Hour), nil
	}, nil))

	t0 := time.Date(2031, time.January, 6, 9, 2, 0, 0, time.UTC) // on copyGrid
	clk := &copyClock{t: t0.Add(17 * time.Second)}
	c, err := prescient.NewClient(st, &prescient.Config{
		Server: "src-1", Grid: copyGrid, Checks: reg, Now: clk.Now, MaxFailures: 2,
		SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	must(err)
	must(st.GridSave(ctx, copyGrid))
	must(c.SyncCatalog(ctx))

	slot := func(n int) time.Time { return copyGrid.Add(t0, n) }
	sched := func(entity, key, check string, at time.Time, payload any) {
		t.Helper()
		_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: entity, Key: key, Check: check, At: at, Payload: payload})
		must(err)
	}
	for i := 1; i <= 3; i++ {
		sched("order", fmt.Sprint(i), "order_unshipped", slot(1), map[string]any{"amount": 10 * i, "sku": "s-" + fmt.Sprint(i)})
	}
	sched("order", "8", "order_unshipped", slot(2), nil)
	sched("order", "9", "order_unshipped", slot(2), nil)
	sched("invoice", "7", "invoice_unpaid", slot(30), map[string]string{"currency": "EUR"})
	sched("invoice", "bad2", "invoice_unpaid", slot(1), nil)
	sched("invoice", "bad", "invoice_unpaid", slot(4), []int{1, 2})
	sched("invoice", "ok", "invoice_unpaid", slot(2), nil)
	sched("signup", "1", "signup_unverified", slot(3), nil)
	sched("payout", "5", "payout_unconfirmed", slot(2), nil) // no such check: stays pending

	for n := 1; n <= 4; n++ {
		clk.set(slot(n).Add(time.Duration(n) * 1500 * time.Millisecond))
		c.Tick(ctx)
		if n == 2 {
			_, err := c.Cancel(ctx, "order", "9", "")
			must(err)
			_, err = c.Resolve(ctx, "order", "8", "shipped")
			must(err)
		}
	}
	return st
}

// exportAll pages through a store's pending jobs and history.
func exportAll(t *testing.T, st driver.Driver) ([]*prescient.Job, []*history.Record) {
	t.Helper()
	ctx := context.Background()
	var (
		jobs []*prescient.Job
		recs []*history.Record
	)
	for after := int64(0); ; {
		page, err := st.JobsExport(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	for after := int64(0); ; {
		page, err := st.HistoryExport(ctx, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	return jobs, recs
}

// fieldDiffs compares every field of two structs of one type: times with
// Equal, JSON by value, the rest with DeepEqual.
func fieldDiffs(got, want any) []string {
	g, w := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	var out []string
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		gf, wf := g.Field(i).Interface(), w.Field(i).Interface()
		var same bool
		switch gv := gf.(type) {
		case time.Time:
			same = gv.Equal(wf.(time.Time))
		case json.RawMessage:
			same = jsonSame(gv, wf.(json.RawMessage))
		default:
			same = reflect.DeepEqual(gf, wf)
		}
		if !same {
			out = append(out, fmt.Sprintf("%s: got %v, want %v", name, gf, wf))
		}
	}
	return out
}

func jsonSame(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}

// openTarget opens the PostgreSQL store a copy wrote to.
func openTarget(t *testing.T, url, schema string) *postgres.Store {
	t.Helper()
	dst, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dst.Close)
	return dst
}

func TestCopySQLiteToPostgres(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "prescient.db")
	src := fillSQLite(t, dbPath)
	srcJobs, srcRecs := exportAll(t, src.Driver())

	// The source holds what a migration must not lose.
	var escalated, failing, withPayload, unknown bool
	for _, j := range srcJobs {
		escalated = escalated || (j.CheckCount > 0 && !j.LastCheckAt.IsZero() && j.Lateness > 0 && j.Runtime > 0)
		failing = failing || (j.FailureCount > 0 && j.LastError != "")
		withPayload = withPayload || len(j.Payload) > 0
		unknown = unknown || j.Check == "payout_unconfirmed"
	}
	outcomes := make(map[history.Outcome]bool)
	for _, r := range srcRecs {
		outcomes[r.Outcome] = true
	}
	if !escalated || !failing || !withPayload || !unknown {
		t.Fatalf("source fixture: escalated %v, failing %v, payload %v, unknown check %v; want all", escalated, failing, withPayload, unknown)
	}
	for _, o := range []history.Outcome{history.Done, history.Resolved, history.Cancelled, history.Failed, history.GuardPast} {
		if !outcomes[o] {
			t.Fatalf("source fixture: no history record with outcome %s (have %v)", o, outcomes)
		}
	}

	// A check that started and never finished (its server died) left an
	// attempt behind: it counts against its job on the target too (found
	// by a new user's trial: the crash count started again).
	crashedAt := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	if _, err := src.Driver().AttemptStart(context.Background(), &driver.AttemptStartParams{
		Server: "dead", Slot: crashedAt, StartedAt: crashedAt, IDs: []int64{srcJobs[0].ID}}); err != nil {
		t.Fatal(err)
	}

	url, schema := pgtest.SchemaName(t)
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+dbPath+"\n")}
	out := h.mustRun("copy", "--to", url, "--to-schema", schema, "--page-size", "2")
	wantContains(t, "copy", out,
		"copied sqlite file "+dbPath+" to postgres ", " schema "+schema+":\n",
		fmt.Sprintf("pending jobs     %d\n", len(srcJobs)),
		fmt.Sprintf("history records  %d\n", len(srcRecs)),
		"catalog entries  3\n",
		"attempts left    1 (",
		"and database.schema at "+schema+";", "= ANY($1)",
		"slot grid        every 10m0s offset 2m0s\n",
		"database.url")

	dst := openTarget(t, url, schema)
	dstJobs, dstRecs := exportAll(t, dst)
	if len(dstJobs) != len(srcJobs) || len(dstRecs) != len(srcRecs) {
		t.Fatalf("target: %d jobs and %d records, want %d and %d", len(dstJobs), len(dstRecs), len(srcJobs), len(srcRecs))
	}
	for i := range srcJobs {
		for _, d := range fieldDiffs(dstJobs[i], srcJobs[i]) {
			t.Errorf("job %s/%s/%s: %s", srcJobs[i].Entity, srcJobs[i].Key, srcJobs[i].Check, d)
		}
	}
	for i := range srcRecs {
		for _, d := range fieldDiffs(dstRecs[i], srcRecs[i]) {
			t.Errorf("history record %d (%s/%s/%s): %s", srcRecs[i].ID, srcRecs[i].Entity, srcRecs[i].Key, srcRecs[i].Check, d)
		}
	}
	if left, err := dst.AttemptsLeft(context.Background()); err != nil || len(left) != 1 || left[0].Server != "dead" ||
		!left[0].Slot.Equal(crashedAt) || !left[0].StartedAt.Equal(crashedAt) || !slices.Equal(left[0].JobIDs, []int64{srcJobs[0].ID}) {
		t.Errorf("target attempts: %+v, %v; want the source's one, naming job %d", left, err, srcJobs[0].ID)
	}
	if g, err := dst.GridGet(context.Background()); err != nil || g.Resolution != copyGrid.Resolution || g.Offset != copyGrid.Offset {
		t.Errorf("target grid: %v, %v; want %v", g, err, copyGrid)
	}

	// Resolve on the target settles invoice/7 through the copied catalog:
	// the binary's own registry (the order example) knows nothing of
	// invoice_unpaid.
	target := &harness{t: t, env: map[string]string{EnvDatabaseURL: url}, config: writeConfig(t, "database:\n  schema: "+schema+"\n")}
	wantContains(t, "resolve on the target", target.mustRun("resolve", "invoice", "7", "paid"), "1")
	if _, err := dst.JobGet(context.Background(), "invoice", "7", "invoice_unpaid"); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("invoice/7 after resolve on the target: %v, want it gone", err)
	}
	recs, err := dst.HistoryList(context.Background(), history.Filter{Entity: "invoice", Key: "7"})
	if err != nil || len(recs) != 1 || recs[0].Outcome != history.Resolved {
		t.Errorf("history of invoice/7 on the target: %+v, %v; want one resolved record", recs, err)
	}

	// A second copy is refused and changes nothing: the source is marked
	// copied (a server started on it again fired the same jobs; found by a
	// trial of a move to PostgreSQL), and so are the commands that write.
	for _, args := range [][]string{{"copy", "--to", url, "--to-schema", schema}, {"run"}, {"schedule", "order", "9", "order_unshipped", "--in", "1h"}} {
		if _, err = h.run(args...); err == nil || !strings.Contains(err.Error(), "was copied to postgres ") || !strings.Contains(err.Error(), "DELETE FROM prescient_copied") {
			t.Errorf("%v after the copy: %v, want a refusal saying the file was copied", args, err)
		}
	}
	if _, err := h.run("status"); err != nil {
		t.Errorf("status after the copy: %v, want it to read the file", err)
	}
	// Unmarked, into the same target: refused, the target is not empty.
	unmarkCopied(t, dbPath)
	_, err = h.run("copy", "--to", url, "--to-schema", schema)
	if err == nil || !strings.Contains(err.Error(), "already holds pending jobs, history or events") {
		t.Errorf("second copy: %v, want a refusal saying the target is not empty", err)
	}
	if jobs, recs := exportAll(t, dst); len(jobs) != len(srcJobs)-1 || len(recs) != len(srcRecs)+1 {
		t.Errorf("after the refused copy: %d jobs and %d records, want %d and %d", len(jobs), len(recs), len(srcJobs)-1, len(srcRecs)+1)
	}
}

func TestCopyRefuses(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	missing := filepath.Join(t.TempDir(), "nope.db")
	// A SQLite file a server is serving: its heartbeat a few seconds old.
	inUse := filepath.Join(t.TempDir(), "in-use.db")
	st, err := sqlite.Open(context.Background(), inUse, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	beat := time.Now().Add(-3 * time.Second)
	if err := st.ServerHeartbeat(context.Background(), &driver.Server{Name: "web-1", StartedAt: beat, HeartbeatAt: beat}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	cases := []struct {
		name   string
		env    map[string]string
		config string
		args   []string
		want   []string
	}{
		{"no target", map[string]string{}, "", []string{"copy"}, []string{"--to is required"}},
		{"bad page size", map[string]string{}, "", []string{"copy", "--to", url, "--page-size", "0"}, []string{"--page-size 0"}},
		// A schema database.schema cannot name: the copy could not be
		// read afterwards (it was created, found by a trial of bad input).
		{"a schema database.schema cannot name", map[string]string{}, "", []string{"copy", "--to", url, "--to-schema", "X Y"},
			[]string{`--to-schema "X Y" is not a plain identifier`}},
		{"missing SQLite file", map[string]string{}, "database:\n  path: " + missing + "\n",
			[]string{"copy", "--to", url, "--to-schema", schema}, []string{"database.path", missing}},
		{"target is the source", map[string]string{EnvDatabaseURL: url}, "database:\n  schema: " + schema + "\n",
			[]string{"copy", "--to", url, "--to-schema", schema}, []string{"the target is the source"}},
		{"a server still running", map[string]string{}, "database:\n  path: " + inUse + "\n",
			[]string{"copy", "--to", url, "--to-schema", schema}, []string{"the source is in use by web-1 (heartbeat ", "stop every prescient server"}},
	}
	for _, c := range cases {
		h := &harness{t: t, env: c.env}
		if c.config != "" {
			h.config = writeConfig(t, c.config)
		}
		_, err := h.run(c.args...)
		if err == nil {
			t.Errorf("%s: no error, want one containing %q", c.name, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", c.name, err, w)
			}
		}
	}
	// Nothing was written to the schema the refused copies named.
	dst := openTarget(t, url, schema)
	if _, err := dst.JobsExport(context.Background(), 0, 1); !errors.Is(err, prescient.ErrNotMigrated) {
		t.Errorf("target after refused copies: %v, want it never migrated", err)
	}
}

func TestSamePostgres(t *testing.T) {
	const u = "postgres://app@db:5432/app"
	tests := []struct {
		src, srcSchema, dst, dstSchema string
		want                           bool
	}{
		{u, "", u, "", true},
		{u, "", u, "public", true},
		{u, "jobs", "postgres://other@db/app?sslmode=disable", "jobs", true},
		{u, "jobs", "host=db port=5432 dbname=app user=app", "jobs", true},
		{u, "", u, "jobs", false},
		{u, "a", u, "b", false},
		{u, "", "postgres://app@db:5432/other", "", false},
		{u, "", "postgres://app@db:5433/app", "", false},
		{u, "", "postgres://app@db2:5432/app", "", false},
	}
	for _, tt := range tests {
		got, err := samePostgres(tt.src, tt.srcSchema, tt.dst, tt.dstSchema)
		if err != nil || got != tt.want {
			t.Errorf("samePostgres(%q, %q, %q, %q) = %v, %v; want %v", tt.src, tt.srcSchema, tt.dst, tt.dstSchema, got, err, tt.want)
		}
	}
	if _, err := samePostgres(u, "", "postgres://app@db:notaport/app", ""); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Errorf("samePostgres with a bad --to: %v, want an error naming --to", err)
	}
}

// failingHistory is a source whose history cannot be read.
type failingHistory struct{ driver.Driver }

func (failingHistory) HistoryExport(context.Context, int64, int) ([]*history.Record, error) {
	return nil, errors.New("disk on fire")
}

// TestCopyAllOrNothing: a copy that fails after writing jobs commits none
// of them, and running it again succeeds.
func TestCopyAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fillSQLite(t, filepath.Join(t.TempDir(), "prescient.db"))
	srcJobs, srcRecs := exportAll(t, src.Driver())
	url, schema := pgtest.SchemaName(t)
	dst := openTarget(t, url, schema)
	if err := dst.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	_, err := copyStore(ctx, failingHistory{src.Driver()}, dst, 2, copyGrid)
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("copy from a failing source: %v, want the source's error", err)
	}
	if jobs, recs := exportAll(t, dst); len(jobs)+len(recs) != 0 {
		t.Fatalf("after a failed copy: %d jobs and %d records on the target, want none", len(jobs), len(recs))
	}

	res, err := copyStore(ctx, src.Driver(), dst, 2, copyGrid)
	if err != nil {
		t.Fatalf("copy again: %v", err)
	}
	if res.Jobs != len(srcJobs) || res.History != len(srcRecs) || res.Catalog != 3 || res.GridFromConf {
		t.Errorf("copy again: %+v, want %d jobs, %d records, 3 catalog entries, the source's grid", res, len(srcJobs), len(srcRecs))
	}
	// New jobs on the target take ids past every copied one.
	maxID := int64(0)
	for _, j := range srcJobs {
		maxID = max(maxID, j.ID)
	}
	for _, r := range srcRecs {
		maxID = max(maxID, r.ID)
	}
	got, err := dst.JobSchedule(ctx, nil, []*driver.JobScheduleParams{{Entity: "order", Key: "new", Check: "order_unshipped",
		At: copyGrid.Add(time.Date(2031, time.February, 1, 0, 2, 0, 0, time.UTC), 0), Now: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Job.ID <= maxID {
		t.Errorf("job scheduled on the target after the copy: id %d, want > %d", got[0].Job.ID, maxID)
	}
}

// TestCopyMovesPendingDeliveries: copy moves the events and their
// deliveries, so a delivery still pending in the source is sent by the
// target's servers; --leave-deliveries, which once left them behind, is
// accepted and says it is ignored.
func TestCopyMovesPendingDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "src.db")
	sqliteWithPendingDelivery(t, path, "order", "42", "c", "ops")
	h := &harness{t: t, config: writeConfig(t, "database:\n  path: "+path+"\n")}
	for _, args := range [][]string{nil, {"--leave-deliveries"}} {
		url, schema := pgtest.Schema(t)
		stdout, stderr, err := h.runCtx(ctx, append([]string{"copy", "--to", url, "--to-schema", schema}, args...)...)
		if err != nil {
			t.Fatalf("copy %v: %v", args, err)
		}
		if !strings.Contains(stdout, "events           1 (1 deliveries still to send") {
			t.Errorf("copy %v did not count the event and its pending delivery:\n%s", args, stdout)
		}
		if len(args) > 0 && !strings.Contains(stderr, "--leave-deliveries is ignored") {
			t.Errorf("copy %v did not say the flag is ignored:\n%s", args, stderr)
		}
		unmarkCopied(t, path) // for the next copy
		dst, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		ds, err := dst.DeliveryList(ctx, &driver.DeliveryListParams{Limit: 10})
		dst.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].Sink != "ops" || ds[0].State != driver.DeliveryPending || ds[0].Event.IdempotencyKey != "order/42/c/alert" {
			t.Fatalf("deliveries in the target after copy %v: %+v, want the pending one to ops of order/42/c/alert", args, ds)
		}
	}
}

// A job that raised a stage on SQLite, moved to PostgreSQL with `prescient
// copy` (the README's way to outgrow the file), must not raise that stage
// again at its next check on PostgreSQL: the stage's idempotency key is in
// the outbox, which copy moves ("a pending job never raises a stage
// twice"). Before copy moved the outbox, the receivers were paged a second
// time for the same order after the move.
func TestCopyDoesNotRaiseStagesAgain(t *testing.T) {
	ctx := context.Background()
	var (
		mu     sync.Mutex
		raised []string // "store:key" per Emit that recorded an event
		store  = "sqlite"
	)
	reg := &checks.Registry{}
	if err := reg.Register("order_unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		ok, err := j.Emit(ctx, checks.Event{Name: "order.unshipped", Stage: "alert", Severity: "warning"})
		if err != nil {
			return time.Time{}, err
		}
		if ok {
			mu.Lock()
			raised = append(raised, store+":"+j.Key)
			mu.Unlock()
		}
		return j.Slot.Add(time.Hour), nil // the escalation, later
	}, &checks.Opts{Awaits: []string{"shipped"}}); err != nil {
		t.Fatal(err)
	}
	clk := &copyClock{}
	t0 := time.Date(2031, time.January, 6, 9, 2, 0, 0, time.UTC) // on copyGrid
	newClient := func(st prescient.Store) *prescient.Client {
		c, err := prescient.NewClient(st, &prescient.Config{
			Server: "srv-1", Grid: copyGrid, Checks: reg, Now: clk.Now,
			SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-",
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// On SQLite: order 42 is checked once and raises its alert.
	dbPath := filepath.Join(t.TempDir(), "prescient.db")
	src, err := sqlite.Open(ctx, dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.GridSave(ctx, copyGrid); err != nil {
		t.Fatal(err)
	}
	clk.set(t0)
	c := newClient(src)
	if err := c.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	slot1 := copyGrid.Add(t0, 1)
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "42", Check: "order_unshipped", At: slot1}); err != nil {
		t.Fatal(err)
	}
	clk.set(slot1.Add(time.Second))
	c.Tick(ctx)
	if len(raised) != 1 {
		t.Fatalf("on SQLite: raised %v, want the alert of order 42 once", raised)
	}
	src.Close()

	// prescient copy --to PostgreSQL, as the README says.
	url, schema := pgtest.SchemaName(t)
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+dbPath+"\n")}
	h.mustRun("copy", "--to", url, "--to-schema", schema)

	// On PostgreSQL: the job's next check (an hour later) must not raise
	// the alert again.
	dst := openTarget(t, url, schema)
	store = "postgres"
	clk.set(slot1.Add(time.Hour + time.Second))
	pc := newClient(dst)
	pc.Tick(ctx)
	j, err := dst.JobGet(ctx, "order", "42", "order_unshipped")
	if err != nil || j.CheckCount != 2 {
		t.Fatalf("order 42 on PostgreSQL: %+v, %v; want it checked a second time", j, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(raised) != 1 {
		t.Errorf("raised %v: the alert of order 42, raised on SQLite before the copy, was raised again on PostgreSQL "+
			"(copy does not move the outbox, so the stage's idempotency key is forgotten)", raised)
	}
}

// A database whose prescient tables are in another schema than the
// configuration names (copied there by copy --to-schema, the configuration
// not yet saying database.schema) is not "not migrated": the commands say
// where the tables are instead of advising migrate, which would make a
// second, empty set of tables; migrate itself warns (found by a new user's
// trial: status said to migrate, migrate did, and the copied jobs were out of
// sight).
func TestTablesInAnotherSchemaAreNamed(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t, "")
	inSchema := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  url: "+url+"\n  schema: copied\n")}
	inSchema.mustRun("migrate")
	inSchema.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")

	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  url: "+url+"\n")}
	for _, args := range [][]string{{"status"}, {"jobs", "list"}, {"history"}} {
		_, err := h.run(args...)
		if err == nil || !strings.Contains(err.Error(), "database.schema: the database has no prescient tables in schema public (the first of the search_path; database.schema is not set), but schema copied holds them") ||
			!strings.Contains(err.Error(), "set database.schema: copied; if this is a new install of its own, run `prescient migrate`") {
			t.Errorf("%v without database.schema: %v; want the schema that holds the tables named", args, err)
		}
	}
	// copy from there (the source then being PostgreSQL) says so too.
	if _, err := h.run("copy", "--to", pgtest.Database(t, "")); err == nil || !strings.Contains(err.Error(), "but schema copied holds them") {
		t.Errorf("copy without database.schema: %v; want the schema that holds the tables named", err)
	}
	// A role that may not read schema copied is not sent there: its
	// database is not migrated, as far as it can tell.
	stranger := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  url: "+pgtest.Role(t, url)+"\n")}
	if _, err := stranger.run("status"); err == nil || strings.Contains(err.Error(), "copied") || !strings.Contains(err.Error(), "no prescient tables yet") {
		t.Errorf("status of a role without access to schema copied: %v; want the database not migrated, no schema named", err)
	}
	// run, which waits for a migration that may be under way, says so
	// while it waits and when it gives up.
	srv := startRun(t, &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  url: "+url+"\n  startup_timeout: 2s\n")})
	<-srv.exit
	if srv.err == nil || !strings.Contains(srv.err.Error(), "but schema copied holds them") {
		t.Errorf("run without database.schema: %v; want the schema that holds the tables named; logs:\n%s", srv.err, srv.stderr.String())
	}
	out, stderr, err := h.runCtx(context.Background(), "migrate")
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	wantContains(t, "migrate beside another schema's tables", stderr,
		"warning: schema copied of this database holds prescient's tables already; this migrate makes another, empty set")
	// Once both are migrated, each is an install of its own: no warning.
	if _, stderr, err := h.runCtx(context.Background(), "migrate"); err != nil || strings.Contains(stderr, "warning: schema") {
		t.Errorf("migrate again: %v, stderr %q; want no warning", err, stderr)
	}
	wantContains(t, "jobs list in the copied schema", inSchema.mustRun("jobs", "list"), "order", "order_unshipped")
}

// With PRESCIENT_DATABASE_URL set, copy's source is that PostgreSQL
// database, not the file's database.path: copy says so, and its advice
// leaves out rewriting SQLite queries (found by a new user's trial: it
// copied PostgreSQL to PostgreSQL without a word, then advised rewriting
// json_each).
func TestCopyFromPostgresNamesItsSource(t *testing.T) {
	t.Parallel()
	from, to := pgtest.Database(t, ""), pgtest.Database(t, "")
	src := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  url: "+from+"\n")}
	src.mustRun("migrate")
	src.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")

	dbPath := filepath.Join(t.TempDir(), "prescient.db")
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: from}, config: writeConfig(t, "database:\n  path: "+dbPath+"\n")}
	out, stderr, err := h.runCtx(context.Background(), "copy", "--to", to)
	if err != nil {
		t.Fatalf("copy: %v\n%s%s", err, out, stderr)
	}
	wantContains(t, "copy's note", stderr, "note: the source is the PostgreSQL database "+EnvDatabaseURL+" names", "not the SQLite file at database.path ("+dbPath)
	wantContains(t, "copy", out, "pending jobs     1\n", "then start the servers")
	if strings.Contains(out, "json_each") {
		t.Errorf("copy from PostgreSQL advises rewriting SQLite's queries:\n%s", out)
	}
}

// TestCopyRefusesATargetInUse: a server already running on the target kept
// the grid it started with while the copy recorded the source's over it,
// and its slots fired none of the copied jobs, which waited for the sweep
// (found by a trial of a move to PostgreSQL).
func TestCopyRefusesATargetInUse(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	dst := openTarget(t, url, schema)
	if err := dst.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	beat := time.Now().Add(-2 * time.Second)
	if err := dst.ServerHeartbeat(context.Background(), &driver.Server{Name: "early", StartedAt: beat, HeartbeatAt: beat}); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "src.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+src+"\n")}
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	_, err := h.run("copy", "--to", url, "--to-schema", schema)
	if err == nil || !strings.Contains(err.Error(), "the target is in use by early (heartbeat ") {
		t.Errorf("copy into a target a server runs on: %v; want it refused, naming the server", err)
	}
	if jobs, err := dst.JobsExport(context.Background(), 0, 1); err != nil || len(jobs) != 0 {
		t.Errorf("target after the refused copy: %d job(s), %v; want none", len(jobs), err)
	}
}

// unmarkCopied deletes the mark copy leaves on a SQLite file, as the
// refusal says to.
func unmarkCopied(t *testing.T, path string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DB().Exec(`DELETE FROM prescient_copied`); err != nil {
		t.Fatal(err)
	}
}

// TestCopyFreezesTheSource: copy read a SQLite file page by page while an
// application kept writing to it, and what it wrote meanwhile was lost (29
// jobs, a reschedule), or failed the copy with a message about ids (found
// by a trial of a move to PostgreSQL). Copy holds the file's write lock
// while it reads: a writer waits, and fails loudly; a copy that cannot
// take the lock says why.
func TestCopyFreezesTheSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	path := filepath.Join(t.TempDir(), "src.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+path+"\n  busy_timeout: 700ms\nguards:\n  runtime: 100ms\ngroup_duration: 100ms\n")}
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	// A writer holds the lock: copy cannot freeze the file, and says so.
	writer, err := sqlite.Open(ctx, path, &sqlite.Opts{BusyTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	frozen, err := writer.Freeze(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.run("copy", "--to", url, "--to-schema", schema); err == nil || !strings.Contains(err.Error(), "a server or an application is writing to it") {
		t.Errorf("copy while another holds the write lock: %v; want it refused, saying so", err)
	}
	// Frozen, the file refuses other writers (as copy's lock does).
	if _, err := h.run("schedule", "order", "2", "order_unshipped", "--in", "1h"); err == nil {
		t.Errorf("schedule while the file is frozen: accepted; want it to fail, not be lost")
	}
	frozen.Release()
	if _, err := h.run("copy", "--to", url, "--to-schema", schema); err != nil {
		t.Errorf("copy once the lock is released: %v", err)
	}
}
