package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// eachStore runs fn against a migrated SQLite file and a migrated
// PostgreSQL schema, each with its configuration file holding extra, and a
// store of the test's own on the same database, for setting up rows the
// commands cannot make.
func eachStore(t *testing.T, extra string, fn func(t *testing.T, h *harness, st prescient.Store)) {
	for _, name := range []string{"sqlite", "postgres"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var (
				h  *harness
				st prescient.Store
			)
			if name == "sqlite" {
				path := filepath.Join(t.TempDir(), "prescient.db")
				h = sqliteHarness(t, path, extra)
				h.mustRun("migrate")
				s, err := sqlite.Open(ctx, path, nil)
				if err != nil {
					t.Fatal(err)
				}
				st = s
			} else {
				var url, schema string
				h, url, schema = dbHarness(t, extra)
				h.mustRun("migrate")
				s, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				st = s
			}
			t.Cleanup(st.Close)
			fn(t, h, st)
		})
	}
}

// wantMatch fails for each regular expression out does not match.
func wantMatch(t *testing.T, what, out string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("%s: output does not match %s:\n%s", what, re, out)
		}
	}
}

// runErr runs a command that must fail, and returns its error.
func (h *harness) runErr(args ...string) error {
	h.t.Helper()
	out, err := h.run(args...)
	if err == nil {
		h.t.Fatalf("prescient %s: no error; output:\n%s", strings.Join(args, " "), out)
	}
	return err
}

// oneJSON decodes out, which must hold exactly one JSON document, into v.
func oneJSON(t *testing.T, what, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: not JSON: %v\n%s", what, err, out)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON document on stdout (%v):\n%s", what, err, out)
	}
	if strings.Contains(out, "database:") {
		t.Errorf("%s: JSON output holds the database line:\n%s", what, out)
	}
	noEscapes(t, what, out)
}

// noEscapes fails when out holds a control character other than newline, or
// a bidirectional or zero-width character: text from checks must reach the
// terminal escaped, in --json output too.
func noEscapes(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if (r < 0x20 && r != '\n') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			t.Fatalf("%s: output holds the control character %U at byte %d:\n%q", what, r, i, out)
		}
	}
}

// errMsg is an error a check might return: long, with an escape sequence
// that would clear the screen, a newline and a right-to-left override.
const errMsg = "look up order: connection reset by peer \x1b[2J\nsecond line of the error, which goes on and on past any column \u202eevil"

// errShown is errMsg as the CLI prints it: escaped.
const errShown = `look up order: connection reset by peer \x1b[2J\nsecond line of the error, which goes on and on past any column \u202eevil`

var (
	t2030 = time.Date(2030, 1, 1, 10, 15, 0, 0, time.UTC)
	past  = time.Date(2020, 1, 1, 9, 0, 0, 0, time.UTC)
)

// importJob stores a pending job with every field as given.
func importJob(t *testing.T, st prescient.Store, j *driver.Job) {
	t.Helper()
	if j.FirstCheckAt.IsZero() {
		j.FirstCheckAt = j.NextCheckAt
	}
	if j.CreatedAt.IsZero() {
		j.CreatedAt, j.UpdatedAt = past, past
	}
	if err := st.Driver().JobsImport(context.Background(), nil, []*driver.Job{j}); err != nil {
		t.Fatal(err)
	}
}

// TestJobsList: jobs list filters by entity, key, check, slot and overdue,
// pages with the hint it prints (and with --json's next), escapes errors,
// and names the flag of a bad value.
func TestJobsList(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		for _, k := range []string{"1", "2", "3"} {
			h.mustRun("schedule", "order", k, "order_unshipped", "--at", "2030-01-01T10:07:00Z")
		}
		h.mustRun("schedule", "order", "4", "order_unshipped", "--at", "2030-01-01T11:00:00Z")
		h.mustRun("schedule", "payout", "7", "payout_unconfirmed", "--at", "2030-01-02T00:00:00Z")
		importJob(t, st, &driver.Job{ID: 1000, Entity: "order", Key: "err", Check: "order_unshipped", NextCheckAt: t2030,
			CheckCount: 1, FailureCount: 2, LastError: errMsg})
		importJob(t, st, &driver.Job{ID: 1001, Entity: "order", Key: "late", Check: "order_unshipped", NextCheckAt: past})

		out := h.mustRun("jobs", "list")
		wantContains(t, "jobs list", out, "database: ",
			`connection reset by peer \x1b[2J\nsecond lin…`,
			"errors cut to 60 characters (…): prescient jobs show ENTITY KEY prints them whole")
		wantMatch(t, "jobs list", out,
			`(?m)^NEXT CHECK\s+DUE\s+ENTITY\s+KEY\s+CHECK\s+CHECKS\s+FAILURES\s+FIRST CHECK\s+ID\s+LAST ERROR$`,
			`(?m)^2020-01-01T09:00:00Z\s+overdue \d+d\d+h\s+order\s+late\s+order_unshipped\s+0\s+0\s+2020-01-01T09:00:00Z\s+1001\s+-$`,
			`(?m)^2030-01-01T10:15:00Z\s+in \d+d\d+h\s+order\s+err\s+order_unshipped\s+1\s+2\s+2030-01-01T10:15:00Z\s+1000\s+look up`)
		noEscapes(t, "jobs list", out)
		if strings.Contains(out, "more jobs match") {
			t.Errorf("jobs list of 7 jobs says more match:\n%s", out)
		}
		// Soonest first, then by id.
		want := []string{"order/late", "order/1", "order/2", "order/3", "order/err", "order/4", "payout/7"}
		if got := listedKeys(t, h, "jobs", "list", "--json"); !slices.Equal(got, want) {
			t.Errorf("jobs list --json: %v, want %v", got, want)
		}

		// Pages of 2, following the printed hint.
		var paged []string
		args := []string{"jobs", "list", "--limit", "2"}
		jobRow := regexp.MustCompile(`(?m)^20\S+\s+(?:in|overdue) \S+\s+(order|payout)\s+(\S+)\s+(?:order_unshipped|payout_unconfirmed)\s`)
		hint := regexp.MustCompile(`more jobs match: for the next page, run the same command with (--after-at \S+) (--after-id \d+)\n`)
		for page := 0; ; page++ {
			if page > 5 {
				t.Fatalf("still paging after 5 pages: %v", paged)
			}
			out := h.mustRun(args...)
			for _, m := range jobRow.FindAllStringSubmatch(out, -1) {
				paged = append(paged, m[1]+"/"+m[2])
			}
			m := hint.FindStringSubmatch(out)
			if m == nil {
				break
			}
			args = append([]string{"jobs", "list", "--limit", "2"}, append(strings.Fields(m[1]), strings.Fields(m[2])...)...)
		}
		if !slices.Equal(paged, want) {
			t.Errorf("jobs list --limit 2, page after page: %v, want %v", paged, want)
		}
		// The same with --json's next.
		var pagedJSON []string
		args = []string{"jobs", "list", "--limit", "3", "--json"}
		for page := 0; ; page++ {
			if page > 5 {
				t.Fatalf("still paging after 5 pages: %v", pagedJSON)
			}
			var p jobsPage
			oneJSON(t, "jobs list --json", h.mustRun(args...), &p)
			for _, j := range p.Jobs {
				pagedJSON = append(pagedJSON, j.Entity+"/"+j.Key)
			}
			if p.More != (p.Next != nil) || (p.More && len(p.Jobs) != 3) {
				t.Fatalf("jobs list --json page %d: more %v, next %v, %d jobs", page, p.More, p.Next, len(p.Jobs))
			}
			if !p.More {
				break
			}
			args = []string{"jobs", "list", "--limit", "3", "--json",
				"--after-at", p.Next.AfterAt.Format(time.RFC3339Nano), "--after-id", fmt.Sprint(p.Next.AfterID)}
		}
		if !slices.Equal(pagedJSON, want) {
			t.Errorf("jobs list --limit 3 --json, page after page: %v, want %v", pagedJSON, want)
		}

		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--check", "payout_unconfirmed"}, []string{"payout/7"}},
			{[]string{"--entity", "order", "--key", "4"}, []string{"order/4"}},
			{[]string{"--entity", "payout"}, []string{"payout/7"}},
			{[]string{"--slot", "2030-01-01T10:15:00Z"}, []string{"order/1", "order/2", "order/3", "order/err"}},
			{[]string{"--slot", "2030-01-01T11:15:00+01:00"}, []string{"order/1", "order/2", "order/3", "order/err"}},
			{[]string{"--overdue"}, []string{"order/late"}},
			{[]string{"--check", "nothing"}, nil},
		} {
			if got := listedKeys(t, h, append([]string{"jobs", "list", "--json"}, tc.args...)...); !slices.Equal(got, tc.want) {
				t.Errorf("jobs list %s: %v, want %v", strings.Join(tc.args, " "), got, tc.want)
			}
		}
		wantContains(t, "jobs list, nothing", h.mustRun("jobs", "list", "--check", "nothing"), "no pending jobs match")
		err := h.runErr("jobs", "list", "--slot", "2030-01-01T10:07:00Z")
		wantContains(t, "jobs list --slot off the grid", err.Error(), `--slot "2030-01-01T10:07:00Z"`, "not on the grid", "2030-01-01T10:00:00Z and 2030-01-01T10:15:00Z")
	})
}

// listedKeys runs a jobs list --json command and returns entity/key of
// every job listed.
func listedKeys(t *testing.T, h *harness, args ...string) []string {
	t.Helper()
	var p jobsPage
	oneJSON(t, strings.Join(args, " "), h.mustRun(args...), &p)
	var keys []string
	for _, j := range p.Jobs {
		keys = append(keys, j.Entity+"/"+j.Key)
	}
	return keys
}

// TestJobsShow: jobs show prints every pending job of an entity key, or the
// one named, whole (errors escaped), with its recent history; says when
// older history exists; and fails for what has neither.
func TestJobsShow(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T10:07:00Z", "--payload", `{"amount": 12}`)
		importJob(t, st, &driver.Job{ID: 1000, Entity: "order", Key: "42", Check: "order_escalate", NextCheckAt: t2030.Add(time.Hour),
			LastCheckAt: t2030.Add(-time.Hour), CheckCount: 3, FailureCount: 2, LastError: errMsg})
		h.mustRun("schedule", "order", "43", "order_unshipped", "--at", "2030-01-01T10:07:00Z")
		for i := range 3 {
			importHistory(t, st, &history.Record{ID: int64(2000 + i), Entity: "order", Key: "42", Check: "order_reminder",
				Outcome: history.Failed, FailureCount: 5, LastError: fmt.Sprintf("reminder %d failed", i),
				FinishedAt: past.Add(time.Duration(i) * time.Hour)})
		}

		out := h.mustRun("jobs", "show", "order", "42")
		wantContains(t, "jobs show order 42", out,
			"order/42 order_escalate: pending (id 1000)",
			"next check   2030-01-01T11:15:00Z (position 1, :15; in ",
			"last check   2030-01-01T09:15:00Z",
			"checks       3 run, 2 failure(s) in a row",
			"last error   "+errShown+"\n",
			"order/42 order_unshipped: pending (id ",
			"next check   2030-01-01T10:15:00Z (position 1, :15; in ",
			"last check   - (no check has run to a result yet)",
			`payload      {"amount": 12}`,
			"history of order/42, newest first:",
			"reminder 2 failed", "reminder 0 failed")
		wantMatch(t, "jobs show order 42", out, `(?m)^2020-01-01T11:00:00Z\s+order\s+42\s+order_reminder\s+failed\s+0\s+5\s+2020-01-01T09:00:00Z\s+-\s+web-1\s+reminder 2 failed$`)
		noEscapes(t, "jobs show", out)
		if strings.Contains(out, "order/43") || strings.Contains(out, "older records exist") {
			t.Errorf("jobs show order 42 shows order 43, or says older records exist:\n%s", out)
		}
		out = h.mustRun("jobs", "show", "order", "42", "--history", "2")
		wantContains(t, "jobs show --history 2", out, "reminder 2 failed", "reminder 1 failed",
			`older records exist: --history 20 shows more, or prescient history --entity order --key 42`)
		if strings.Contains(out, "reminder 0 failed") {
			t.Errorf("jobs show --history 2 shows a third record:\n%s", out)
		}

		var shown jobsShown
		oneJSON(t, "jobs show --json", h.mustRun("jobs", "show", "order", "42", "order_escalate", "--json", "--history", "1"), &shown)
		if len(shown.Pending) != 1 || shown.Pending[0].LastError != errMsg || shown.Pending[0].FailureCount != 2 ||
			len(shown.History) != 0 || shown.MoreHistory {
			t.Errorf("jobs show order 42 order_escalate --json = %+v; want the one job, its error whole, and no history (none of that check)", shown)
		}
		oneJSON(t, "jobs show --json", h.mustRun("jobs", "show", "order", "42", "--json", "--history", "2"), &shown)
		if len(shown.Pending) != 2 || len(shown.History) != 2 || !shown.MoreHistory {
			t.Errorf("jobs show order 42 --json --history 2: %d pending, %d history, more %v; want 2, 2, true", len(shown.Pending), len(shown.History), shown.MoreHistory)
		}

		// Nothing pending, history only.
		h.mustRun("cancel", "order", "43")
		out = h.mustRun("jobs", "show", "order", "43")
		wantContains(t, "jobs show of a cancelled job", out, "order/43: nothing pending")
		wantMatch(t, "jobs show of a cancelled job", out, `(?m)^\S+\s+order\s+43\s+order_unshipped\s+cancelled\s+0\s+0\s`)
		// Neither.
		err := h.runErr("jobs", "show", "order", "99")
		wantContains(t, "jobs show order 99", err.Error(), "show order/99: no pending job and no history record", "prescient jobs list --entity order")
		err = h.runErr("jobs", "show", "order", "42", "order_nothing")
		wantContains(t, "jobs show order 42 order_nothing", err.Error(), "show order/42/order_nothing: no pending job and no history record")
	})
}

// importHistory stores a history record with every field as given.
func importHistory(t *testing.T, st prescient.Store, r *history.Record) {
	t.Helper()
	if r.FirstCheckAt.IsZero() {
		r.FirstCheckAt = past
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = past
	}
	if r.FinishedBy == "" {
		r.FinishedBy = "web-1"
	}
	if err := st.Driver().HistoryImport(context.Background(), nil, []*history.Record{r}); err != nil {
		t.Fatal(err)
	}
}

// TestReschedule: reschedule moves a pending job to the slot of --at or
// --in, prints it (or JSON), and fails, saying so, for a job not pending.
func TestReschedule(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T10:07:00Z")
		out := h.mustRun("reschedule", "order", "42", "order_unshipped", "--at", "2030-01-01T12:01:00Z")
		wantContains(t, "reschedule --at", out, "database: ",
			"order/42 order_unshipped: next check moved to slot 2030-01-01T12:15:00Z (position 1, :15); first check 2030-01-01T12:15:00Z, 0 check(s) so far")
		j, err := st.Driver().JobGet(context.Background(), "order", "42", "order_unshipped")
		if err != nil || !j.NextCheckAt.Equal(time.Date(2030, 1, 1, 12, 15, 0, 0, time.UTC)) {
			t.Fatalf("after reschedule the job is %+v, %v; want it due at 12:15", j, err)
		}

		before := time.Now()
		var moved scheduledJob
		oneJSON(t, "reschedule --in --json", h.mustRun("reschedule", "order", "42", "order_unshipped", "--in", "3h", "--json"), &moved)
		g := prescient.Config{}.WithDefaults().Grid
		lo, hi := g.Ceil(before.Add(3*time.Hour)), g.Ceil(time.Now().Add(3*time.Hour))
		if moved.Job == nil || moved.Key != "42" || moved.NextCheckAt.Before(lo) || moved.NextCheckAt.After(hi) || moved.Position != g.Position(moved.NextCheckAt) {
			t.Errorf("reschedule --in 3h --json = %+v; want order 42 in slot %s (or %s) with its position", moved, lo, hi)
		}

		err = h.runErr("reschedule", "order", "9", "order_unshipped", "--in", "1h")
		wantContains(t, "reschedule of nothing", err.Error(), "reschedule: no pending job order/9/order_unshipped, so nothing was moved", "prescient jobs show order 9")
		if _, err := st.Driver().JobGet(context.Background(), "order", "9", "order_unshipped"); !errors.Is(err, prescient.ErrNotFound) {
			t.Errorf("reschedule of a job not pending created one (%v)", err)
		}
	})
}

// TestRetry: a job whose check fails ends failed (with its failure count and
// error in history); retry --dry-run says it would retry it and schedules
// nothing; retry schedules it again once; a job pending again, or that
// finished again since, is skipped with the reason.
func TestRetry(t *testing.T) {
	t.Parallel()
	// The stock binary's order_unshipped fails here: there is no orders table.
	eachStore(t, "retry:\n  max_failures: 1\n", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		for _, k := range []string{"1", "2"} {
			if _, err := st.Driver().JobSchedule(ctx, nil, []*driver.JobScheduleParams{{
				Entity: "order", Key: k, Check: "order_unshipped", At: past, OnConflict: prescient.ConflictReplace, Now: past,
			}}); err != nil {
				t.Fatal(err)
			}
		}
		var swept prescient.SweepResult
		oneJSON(t, "sweep --json", h.mustRun("sweep", "--mode", "run", "--json"), &swept)
		if swept.Mode != prescient.SweepRun || swept.Slots != 1 || swept.Jobs != 2 {
			t.Fatalf("sweep --mode run --json = %+v, want 1 slot and 2 jobs checked", swept)
		}
		out := h.mustRun("history", "--outcome", "failed", "--full")
		wantMatch(t, "history of the failed jobs", out, `(?m)^\S+\s+order\s+1\s+order_unshipped\s+failed\s+0\s+1\s+2020-01-01T09:00:00Z\s+-\s+\S+\s+look up order 1: .*orders`)

		out = h.mustRun("retry", "--dry-run")
		wantContains(t, "retry --dry-run", out, "would retry (--dry-run: nothing scheduled) 2 job(s):")
		wantMatch(t, "retry --dry-run", out, `(?m)^  ENTITY\s+KEY\s+CHECK\s+FAILED AT\s+FAILED WITH$`, `(?m)^  order\s+1\s+order_unshipped\s+\S+\s+look up order 1`)
		if _, err := st.Driver().JobGet(ctx, "order", "1", "order_unshipped"); !errors.Is(err, prescient.ErrNotFound) {
			t.Fatalf("retry --dry-run scheduled order 1 (%v)", err)
		}

		out = h.mustRun("retry", "--entity", "order", "--key", "1", "--at", "2030-01-01T10:07:00Z")
		wantContains(t, "retry order 1", out, "retried 1 job(s):")
		wantMatch(t, "retry order 1", out, `(?m)^  ENTITY\s+KEY\s+CHECK\s+FAILED AT\s+NEXT CHECK\s+FAILED WITH$`, `(?m)^  order\s+1\s+order_unshipped\s+\S+\s+2030-01-01T10:15:00Z\s+look up order 1`)
		j, err := st.Driver().JobGet(ctx, "order", "1", "order_unshipped")
		if err != nil || !j.NextCheckAt.Equal(t2030) {
			t.Fatalf("order 1 after retry: %+v, %v; want it pending at %s", j, err, t2030)
		}

		// Order 1 is pending again; order 2 is cancelled after it is retried.
		var res prescient.RetryResult
		oneJSON(t, "retry --check --json", h.mustRun("retry", "--check", "order_unshipped", "--since", "1h", "--json"), &res)
		if len(res.Retried) != 1 || res.Retried[0].Failed.Key != "2" || res.Retried[0].Job == nil ||
			len(res.Skipped) != 1 || res.Skipped[0].Failed.Key != "1" || res.Skipped[0].Skipped != "pending" {
			t.Fatalf("retry --json = %s; want order 2 retried and order 1 skipped as pending", mustJSON(res))
		}
		h.mustRun("cancel", "order", "2")
		out = h.mustRun("retry")
		wantContains(t, "retry again", out, "retried 0 job(s)\n", "skipped 2 failed job(s):")
		wantMatch(t, "retry again", out, `(?m)^  order\s+1\s+order_unshipped\s+\S+\s+pending$`, `(?m)^  order\s+2\s+order_unshipped\s+\S+\s+finished again since \(cancelled\)$`)
		wantContains(t, "retry of nothing", h.mustRun("retry", "--check", "payout_unconfirmed"), "no failed jobs match")
	})
}

func compact(raw []byte) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return "invalid JSON: " + string(raw)
	}
	return b.String()
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestJSONOutput: every command that prints a result prints exactly one JSON
// document with --json, without the database line, on both stores.
func TestJSONOutput(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		var mig migrateResult
		oneJSON(t, "migrate --json", h.mustRun("migrate", "--json"), &mig)
		if mig.Resolution != "15m0s" || mig.Offset != "0s" || mig.Checks != 1 || mig.GridKept || !strings.Contains(mig.Database, "schema") && !strings.Contains(mig.Database, "sqlite file") {
			t.Errorf("migrate --json = %+v", mig)
		}

		var job scheduledJob
		oneJSON(t, "schedule --json", h.mustRun("schedule", "order", "42", "order_unshipped", "--at", "2030-01-01T10:07:00Z", "--payload", `{"amount": 12}`, "--json"), &job)
		if job.Job == nil || job.Entity != "order" || job.Key != "42" || job.Check != "order_unshipped" ||
			!job.NextCheckAt.Equal(t2030) || job.Position != 1 || compact(job.Payload) != `{"amount":12}` {
			t.Errorf("schedule --json = %s", mustJSON(job))
		}
		h.mustRun("schedule", "order", "43", "order_unshipped", "--at", "2030-01-01T10:07:00Z")

		var n map[string]int
		oneJSON(t, "resolve --json", h.mustRun("resolve", "order", "42", "shipped", "--json"), &n)
		if fmt.Sprint(n) != "map[resolved:1]" {
			t.Errorf("resolve --json = %v, want resolved 1", n)
		}
		n = nil
		oneJSON(t, "cancel --json", h.mustRun("cancel", "order", "43", "--json"), &n)
		if fmt.Sprint(n) != "map[cancelled:1]" {
			t.Errorf("cancel --json = %v, want cancelled 1", n)
		}
		var swept prescient.SweepResult
		oneJSON(t, "sweep --json", h.mustRun("sweep", "--mode", "reslot", "--json"), &swept)
		if swept.Mode != prescient.SweepReslot || swept.Jobs != 0 || swept.To.IsZero() {
			t.Errorf("sweep --mode reslot --json = %+v", swept)
		}
		var recs []*history.Record
		oneJSON(t, "history --json", h.mustRun("history", "--json"), &recs)
		if len(recs) != 2 {
			t.Errorf("history --json: %d records, want 2", len(recs))
		}
		var status prescient.Status
		oneJSON(t, "status --json", h.mustRun("status", "--json"), &status)
		var shown jobsShown
		oneJSON(t, "jobs show --json", h.mustRun("jobs", "show", "order", "42", "--json"), &shown)
		var v versionInfo
		oneJSON(t, "version --json", h.mustRun("version", "--json"), &v)
		var res prescient.RetryResult
		oneJSON(t, "retry --json", h.mustRun("retry", "--json"), &res)
	})
}

// TestSlotsJSON: slots --json holds the grid, each position's start and
// owners, the overlap warnings, and says whether the configuration is valid
// (exiting non-zero when not), without a database.
func TestSlotsJSON(t *testing.T) {
	t.Parallel()
	config := writeConfig(t, "slots: {resolution: 6h, cycle: 24h}\nownership:\n  static:\n    a: [0, 1]\n    b: [1, 2, 3]\n")
	h := &harness{t: t, env: map[string]string{"PRESCIENT_SERVER": "a"}, config: config}
	var rep slotsReport
	oneJSON(t, "slots --json", h.mustRun("slots", "--json"), &rep)
	want := slotsReport{Resolution: "6h0m0s", Offset: "0s", Cycle: "24h0m0s", Ownership: "static", Valid: true,
		Positions: []slotsPosition{
			{0, "00:00", []string{"a"}}, {1, "06:00", []string{"a", "b"}}, {2, "12:00", []string{"b"}}, {3, "18:00", []string{"b"}},
		},
		Warnings: []string{"position 1 (06:00) is fired by 2 servers: a, b (safe, but each slot is fired twice)"}}
	if mustJSON(rep) != mustJSON(want) {
		t.Errorf("slots --json =\n%s\nwant\n%s", mustJSON(rep), mustJSON(want))
	}
	// The warning the text gives of a server name the map leaves out is in
	// the JSON too (found by an operator's trial).
	rep = slotsReport{}
	oneJSON(t, "slots --json as server z", (&harness{t: t, env: map[string]string{"PRESCIENT_SERVER": "z"}, config: config}).mustRun("slots", "--json"), &rep)
	if len(rep.Warnings) != 2 || !strings.Contains(rep.Warnings[1], `server name, "z" (server, PRESCIENT_SERVER or the host name), is not in ownership.static`) {
		t.Errorf("slots --json as server z: warnings %q; want the overlap and that z is not in the map", rep.Warnings)
	}

	bad := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "ownership:\n  static:\n    a: [0, 1]\n    b: [3]\n")}
	out, err := bad.run("slots", "--json")
	if err == nil || !strings.Contains(err.Error(), "position has no owner") {
		t.Fatalf("slots --json with an unowned position: error %v, want one saying a position has no owner", err)
	}
	rep = slotsReport{}
	oneJSON(t, "slots --json, invalid", out, &rep)
	if rep.Valid || !strings.Contains(rep.Error, "position has no owner: position(s) [2]") || len(rep.Positions[2].Servers) != 0 {
		t.Errorf("slots --json with an unowned position = %s; want valid false, the error, and no servers at position 2", mustJSON(rep))
	}

	var every slotsReport
	oneJSON(t, "slots --json, defaults", (&harness{t: t, env: map[string]string{}}).mustRun("slots", "--json"), &every)
	if every.Ownership != "every" || len(every.Positions) != 4 || every.Positions[3].Starts != ":45" || !every.Valid || len(every.Warnings) != 0 {
		t.Errorf("slots --json with the defaults = %s", mustJSON(every))
	}
}

// TestHistoryMoreFullAndEscaped: history says when more records match than
// --limit, shows the failure count, cuts long errors only with a note
// saying how to see them whole (--full, --json), and escapes them.
func TestHistoryMoreFullAndEscaped(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		for i := range 3 {
			importHistory(t, st, &history.Record{ID: int64(2000 + i), Entity: "order", Key: fmt.Sprint(i), Check: "order_unshipped",
				Outcome: history.Failed, CheckCount: 2, FailureCount: 3 + i, LastError: errMsg, FinishedAt: time.Now().Add(-time.Duration(i) * time.Minute).UTC().Truncate(time.Microsecond)})
		}

		out := h.mustRun("history", "--limit", "2")
		wantMatch(t, "history --limit 2", out,
			`(?m)^FINISHED\s+ENTITY\s+KEY\s+CHECK\s+OUTCOME\s+CHECKS\s+FAILURES\s+FIRST SLOT`,
			`(?m)^\S+\s+order\s+0\s+order_unshipped\s+failed\s+2\s+3\s`,
			`(?m)^\S+\s+order\s+1\s+order_unshipped\s+failed\s+2\s+4\s`)
		wantContains(t, "history --limit 2", out,
			`look up order: connection reset by peer \x1b[2J\nsecond lin…`,
			"errors cut to 60 characters (…): --full prints them whole, as --json does",
			"more records match than the 2 shown: for the next page, run the same command with --after-at ")
		noEscapes(t, "history", out)
		if strings.Contains(out, "order   2 ") {
			t.Errorf("history --limit 2 shows a third record:\n%s", out)
		}
		out = h.mustRun("history", "--limit", "3")
		if strings.Contains(out, "more records match") {
			t.Errorf("history --limit 3 of 3 records says more match:\n%s", out)
		}
		out = h.mustRun("history", "--full")
		wantContains(t, "history --full", out, errShown+"\n")
		noEscapes(t, "history --full", out)
		if strings.Contains(out, "errors cut") {
			t.Errorf("history --full says errors are cut:\n%s", out)
		}

		stdout, stderr, err := h.runCtx(context.Background(), "history", "--json", "--limit", "1")
		if err != nil {
			t.Fatal(err)
		}
		var recs []*history.Record
		oneJSON(t, "history --json --limit 1", stdout, &recs)
		if len(recs) != 1 || recs[0].LastError != errMsg || recs[0].FailureCount != 3 {
			t.Errorf("history --json --limit 1 = %s; want one record with its error whole", mustJSON(recs))
		}
		wantContains(t, "history --json --limit 1, stderr", stderr, "note: more records match than the 1 shown")
	})
}

// TestHistoryPages: following history's hint (--after-at, --after-id) from
// page to page lists every record once, in order, though the records of
// one transaction share their finished time: --until alone would skip
// those a page ended among.
func TestHistoryPages(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
		var want []string
		for i := range 7 {
			// Records 3000..3004 finished together; 3005 and 3006 earlier.
			fin := at
			if i >= 5 {
				fin = at.Add(-time.Duration(i) * time.Minute)
			}
			importHistory(t, st, &history.Record{ID: int64(3000 + i), Entity: "order", Key: fmt.Sprint(i), Check: "order_unshipped",
				Outcome: history.Done, CheckCount: 1, FinishedAt: fin})
		}
		for _, id := range []int{3004, 3003, 3002, 3001, 3000, 3005, 3006} {
			want = append(want, fmt.Sprint(id))
		}
		hint := regexp.MustCompile(`--after-at (\S+) --after-id (\d+)`)
		var got []string
		args := []string{"history", "--json", "--limit", "2"}
		for page := 0; ; page++ {
			if page > 5 {
				t.Fatalf("history pages never end; listed %v", got)
			}
			stdout, stderr, err := h.runCtx(context.Background(), args...)
			if err != nil {
				t.Fatal(err)
			}
			var recs []*history.Record
			oneJSON(t, strings.Join(args, " "), stdout, &recs)
			for _, r := range recs {
				got = append(got, fmt.Sprint(r.ID))
			}
			m := hint.FindStringSubmatch(stderr)
			if m == nil {
				break
			}
			args = []string{"history", "--json", "--limit", "2", "--after-at", m[1], "--after-id", m[2]}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("history paged 2 at a time listed %v, want %v", got, want)
		}
		out := h.mustRun("history", "--limit", "3")
		wantContains(t, "history --limit 3", out, "more records match than the 3 shown: for the next page, run the same command with --after-at "+
			at.Format(time.RFC3339Nano)+" --after-id 3002")
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"history", "--after-at", at.Format(time.RFC3339Nano)}, "--after-at " + `"` + at.Format(time.RFC3339Nano) + `" needs --after-id`},
			{[]string{"history", "--after-id", "3002"}, "--after-id 3002 needs --after-at"},
			{[]string{"history", "--after-at", "yesterday", "--after-id", "3002"}, `--after-at "yesterday" is not an RFC 3339 time`},
		} {
			_, _, err := h.runCtx(context.Background(), tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v: %v, want an error saying %q", tt.args, err, tt.want)
			}
		}
	})
}

// TestOperatorFlagErrors: the new commands' errors name the flag and the
// bad value.
func TestOperatorFlagErrors(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+filepath.Join(t.TempDir(), "p.db")+"\n")}
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"jobs", "list", "--key", "42"}, []string{`--key "42" needs --entity`}},
		{[]string{"jobs", "list", "--limit", "0"}, []string{"--limit 0 must be between 1 and 10000"}},
		{[]string{"jobs", "list", "--limit", "10001"}, []string{"--limit 10001"}},
		{[]string{"jobs", "list", "--slot", "tomorrow"}, []string{`--slot "tomorrow" is not an RFC 3339 time`}},
		{[]string{"jobs", "list", "--after-id", "5"}, []string{"--after-id 5 needs --after-at"}},
		{[]string{"jobs", "list", "--after-at", "2030-01-01T10:00:00Z"}, []string{`--after-at "2030-01-01T10:00:00Z" needs --after-id`}},
		{[]string{"jobs", "list", "--after-at", "soon", "--after-id", "5"}, []string{`--after-at "soon" is not an RFC 3339 time`}},
		{[]string{"jobs", "show", "order"}, []string{"show: expected ENTITY KEY [CHECK], got 1 argument (missing KEY)"}},
		{[]string{"jobs", "show", "order", "1", "--history", "-1"}, []string{"--history -1 must be between 0"}},
		{[]string{"reschedule", "order", "1", "c"}, []string{"say when to check: --at TIME", "--in DURATION"}},
		{[]string{"reschedule", "order", "1", "c", "--at", "2030-01-01 10:00"}, []string{`--at "2030-01-01 10:00" is not an RFC 3339 time`}},
		{[]string{"reschedule", "order", "1", "c", "--in", "3 hours"}, []string{`--in "3 hours" is not a Go duration of 0 or more`}},
		{[]string{"reschedule", "order", "1", "c", "--in", "1h", "--at", "2030-01-01T10:00:00Z"}, []string{"only one"}},
		{[]string{"reschedule", "order", "1"}, []string{"reschedule: expected ENTITY KEY CHECK, got 2 arguments (missing CHECK)"}},
		{[]string{"retry", "--since", "yesterday"}, []string{`--since "yesterday"`, "RFC 3339", "24h"}},
		{[]string{"retry", "--in", "-1h"}, []string{`--in "-1h" is not a Go duration of 0 or more`}},
		// Found by a trial of bad input: no word of days or of Go's end.
		{[]string{"reschedule", "order", "1", "c", "--in", "3d"}, []string{`--in "3d"`, "Go durations have no days or weeks, write 72h"}},
		{[]string{"reschedule", "order", "1", "c", "--in", "9999999999h"}, []string{"too long, a duration ends at 2562047h"}},
		{[]string{"retry", "--since", "2w"}, []string{`--since "2w"`, "write 336h"}},
		{[]string{"retry", "--at", "now"}, []string{`--at "now" is not an RFC 3339 time`}},
		{[]string{"retry", "--key", "1"}, []string{`--key "1" needs --entity`}},
		{[]string{"retry", "--limit", "-1"}, []string{"--limit -1 must be between 1 and 100000"}},
	} {
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

// TestSafeText: what safeText escapes, and what it leaves alone.
func TestSafeText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain error: 42 rows", "plain error: 42 rows"},
		{"Bestellung für Zoë 🚚", "Bestellung für Zoë 🚚"},
		{"a\nb\tc\rd", `a\nb\tc\rd`},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"del\x7f c1\u0085", `del\x7f c1\u0085`},
		{"bidi \u202eevil\u2066 zw\u200b\ufeff ls\u2028", `bidi \u202eevil\u2066 zw\u200b\ufeff ls\u2028`},
		{"bad utf-8 \xff\xfe", `bad utf-8 \xff\xfe`},
		{"back\\slash and a tab\t", `back\\slash and a tab\t`},
		{"", ""},
	} {
		if got := safeText(tc.in); got != tc.want {
			t.Errorf("safeText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// A backslash alone stays: nothing else needs escaping.
	if got := safeText(`C:\path`); got != `C:\path` {
		t.Errorf("safeText of a plain backslash = %q", got)
	}
	var b bytes.Buffer
	b.WriteString(safeText(errMsg))
	noEscapes(t, "safeText(errMsg)", b.String())
}

// TestWriteJSONEscapesWhatTerminalsActOn: --json output escapes what
// encoding/json leaves raw and a terminal acts on (DEL, C1, bidirectional
// and zero-width characters, beyond the BMP too), and decodes to the same
// text.
func TestWriteJSONEscapesWhatTerminalsActOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string // in the output
	}{
		{"plain error: 42 rows, Zoë 🚚", []string{`"plain error: 42 rows, Zoë 🚚"`}},
		{"del\x7f csi\u009b2J nel\u0085", []string{`del\u007f csi\u009b2J nel\u0085`}},
		{"bidi \u202eevil\u2066 zw\u200b\ufeff", []string{`bidi \u202eevil\u2066 zw\u200b\ufeff`}},
		{"tag \U000e0001 beyond the BMP", []string{`tag \udb40\udc01 beyond`}},
		{errMsg, []string{`\u001b[2J\n`, `\u202eevil`}},
	} {
		var b bytes.Buffer
		if err := writeJSON(&b, map[string]string{"s": tc.in}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		noEscapes(t, fmt.Sprintf("writeJSON(%q)", tc.in), out)
		wantContains(t, fmt.Sprintf("writeJSON(%q)", tc.in), out, tc.want...)
		var back map[string]string
		if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["s"] != tc.in {
			t.Errorf("writeJSON(%q) decodes to %q, %v", tc.in, back["s"], err)
		}
	}
}
