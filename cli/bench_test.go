package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestBench runs `prescient bench` with small numbers on both stores, as
// text and as JSON, and checks every job was scheduled, checked once, wrote
// its alert and left the pending table. It never looks at how long anything
// took beyond "measured and positive".
func TestBench(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		store string
		env   map[string]string
	}{
		{"sqlite", map[string]string{}},
		{"postgres", map[string]string{EnvDatabaseURL: pgtest.URL()}},
	} {
		t.Run(tc.store, func(t *testing.T) {
			t.Parallel()
			h := &harness{t: t, env: tc.env}

			out := h.mustRun("bench", "--jobs", "250", "--slots", "4", "--schedule-batch", "100", "--workers", "3")
			for _, re := range []string{
				`(?m)^store\s+` + tc.store + ` \(`,
				`(?m)^jobs\s+250 in 4 slots, scheduled 100 per call, 3 workers$`,
				`(?m)^schedule\s+\S+\s+\d+ jobs/s\s+[\d.]+ (B|KiB|MiB)/job\s+\d+ allocs/job$`,
				`(?m)^due query\s+\S+ per slot\s+\S+ per due job\s+\(8 queries, 250 jobs pending\)$`,
				`(?m)^fire\s+\S+\s+\d+ jobs/s\s+[\d.]+ (B|KiB|MiB)/job\s+\d+ allocs/job$`,
				`(?m)^fire batch\s+\S+\s+\d+ jobs/s\s+[\d.]+ (B|KiB|MiB)/job\s+\d+ allocs/job$`,
				`(?m)^pure SQL\s+\S+\s+\d+ jobs/s\s+\(one statement per up to 10000 jobs, no engine, no history\)$`,
				`(?m)^vs pure SQL\s+single-job checks \d+%, batch checks \d+%$`,
				map[string]string{
					"sqlite":   `(?m)^SQL with history\s+\S+\s+\d+ jobs/s\s+\(pure SQL plus a history row per job\)$`,
					"postgres": `(?m)^SQL with history\s+\S+\s+\d+ jobs/s\s+\(pure SQL plus the claim's row locks and a history row per job\)$`,
				}[tc.store],
				`(?m)^vs SQL with history\s+single-job checks \d+%, batch checks \d+%$`,
				`(?m)^slot fire p50\s+\S+$`,
				`(?m)^slot fire p99\s+\S+$`,
				`(?m)^checked\s+250 \(done 250, failures 0\)$`,
				`(?m)^alerts\s+250 \(batch 250, pure SQL 250\)$`,
				`(?m)^history rows\s+250 \(SQL with history\)$`,
				`(?m)^pending after\s+0$`,
			} {
				if !regexp.MustCompile(re).MatchString(out) {
					t.Errorf("output does not match %s:\n%s", re, out)
				}
			}

			out = h.mustRun("bench", "--jobs", "7", "--slots", "3", "--json")
			var res benchResult
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("bench --json: %v\n%s", err, out)
			}
			// Slots hold 3, 2 and 2 jobs: each is listed in one page, then
			// an empty page ends it.
			want := benchResult{
				Store: tc.store, Database: res.Database,
				Jobs: 7, Slots: 3, ScheduleBatch: benchScheduleBatchDefault, Workers: 10,
				Schedule: res.Schedule, DueQuery: res.DueQuery, Fire: res.Fire, FireBatch: res.FireBatch, PureSQL: res.PureSQL,
				SQLHistory: res.SQLHistory, SQLHistoryRows: 7,
				SlotP50: res.SlotP50, SlotP99: res.SlotP99,
				Checked: 7, Done: 7, Failures: 0, Alerts: 7, BatchAlerts: 7, SQLAlerts: 7, Pending: 0,
			}
			if res != want {
				t.Errorf("bench --json = %+v\nwant %+v", res, want)
			}
			if res.DueQuery.Queries != 6 {
				t.Errorf("due query ran %d queries, want 6 (a page and an empty page per slot)", res.DueQuery.Queries)
			}
			for name, p := range map[string]benchPhase{"schedule": res.Schedule, "fire": res.Fire, "fire batch": res.FireBatch, "pure SQL": res.PureSQL, "SQL with history": res.SQLHistory} {
				if p.Time <= 0 || p.JobsPerSec <= 0 || p.BytesPerJob <= 0 || p.AllocsPerJob <= 0 {
					t.Errorf("%s phase not measured: %+v", name, p)
				}
			}
			if res.DueQuery.Time <= 0 || res.DueQuery.PerSlot <= 0 || res.DueQuery.PerDueJob <= 0 {
				t.Errorf("due query not measured: %+v", res.DueQuery)
			}
			if res.SlotP50 <= 0 || res.SlotP99 < res.SlotP50 {
				t.Errorf("slot fire p50 %s, p99 %s: want 0 < p50 <= p99", res.SlotP50, res.SlotP99)
			}
			checkBenchDBRemoved(t, tc.store, res.Database)
		})
	}
}

// checkBenchDBRemoved checks the throwaway SQLite file or PostgreSQL schema
// described by database is gone.
func checkBenchDBRemoved(t *testing.T, store, database string) {
	t.Helper()
	if store == "sqlite" {
		m := regexp.MustCompile(`^SQLite file (\S+bench\.db)$`).FindStringSubmatch(database)
		if m == nil {
			t.Fatalf("database %q does not name a SQLite file", database)
		}
		if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after the bench (%v)", m[1], err)
		}
		return
	}
	m := regexp.MustCompile(`schema (prescient_bench_[0-9a-f]+)$`).FindStringSubmatch(database)
	if m == nil {
		t.Fatalf("database %q does not name a schema", database)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, m[1]).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after the bench", m[1])
	}
}

func TestBenchOptsValidate(t *testing.T) {
	ok := benchOpts{jobs: 10, slots: 2, scheduleBatch: 5, workers: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(%+v) = %v, want nil", ok, err)
	}
	for _, c := range []struct {
		name string
		mod  func(*benchOpts)
		want string
	}{
		{"no jobs", func(o *benchOpts) { o.jobs = 0 }, "--jobs 0 must be between 1 and"},
		{"too many jobs", func(o *benchOpts) { o.jobs = benchJobsMax + 1 }, "--jobs 10000001 must be between 1 and"},
		{"no slots", func(o *benchOpts) { o.slots = 0 }, "--slots 0 must be at least 1"},
		{"slots over jobs", func(o *benchOpts) { o.slots = 11 }, "--slots 11 must not exceed --jobs 10"},
		{"no schedule batch", func(o *benchOpts) { o.scheduleBatch = 0 }, "--schedule-batch 0 must be between 1 and"},
		{"no workers", func(o *benchOpts) { o.workers = -1 }, "--workers -1 must be between 1 and"},
	} {
		o := ok
		c.mod(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate(%+v) = %v, want an error containing %q", c.name, o, err, c.want)
		}
	}
}

// TestBenchFlags checks the command refuses bad flags, naming the flag, fits
// the default slots to a few jobs, and documents itself.
func TestBenchFlags(t *testing.T) {
	h := &harness{t: t, env: map[string]string{}}
	_, err := h.run("bench", "--jobs", "0")
	if err == nil || !strings.Contains(err.Error(), "--jobs 0") {
		t.Errorf("bench --jobs 0 = %v, want an error naming --jobs", err)
	}
	// Without --slots, a handful of jobs gets one slot each.
	var res benchResult
	if err := json.Unmarshal([]byte(h.mustRun("bench", "--jobs", "2", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.Slots != 2 || res.Checked != 2 || res.Alerts != 2 {
		t.Errorf("bench --jobs 2: %d slots, %d checked, %d alerts; want 2, 2, 2", res.Slots, res.Checked, res.Alerts)
	}
	if _, err := h.run("bench", "--jobs", "2", "--slots", "3"); err == nil || !strings.Contains(err.Error(), "--slots 3 must not exceed --jobs 2") {
		t.Errorf("bench --jobs 2 --slots 3 = %v, want an error naming --slots", err)
	}
	out := h.mustRun("bench", "--help")
	for _, w := range []string{"Examples:", "prescient bench --jobs", "--slots N", "--json"} {
		if !strings.Contains(out, w) {
			t.Errorf("bench --help lacks %q:\n%s", w, out)
		}
	}
}

// TestBenchInterruptedRemovesItsDatabase: bench and demo interrupted by a
// signal (Ctrl-C, a SIGTERM, a closed terminal) still remove their
// throwaway database, here bench's SQLite file; the signal killed them and
// left it behind (found by an SRE's trial).
func TestBenchInterruptedRemovesItsDatabase(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "prescient")
	build := exec.Command("go", "build", "-o", bin, "./cmd/prescient")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		tmp := t.TempDir()
		cmd := exec.Command(bin, "bench", "--jobs", "200000")
		cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
		cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, EnvDatabaseURL+"=") })
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		scratch := func() []string {
			m, _ := filepath.Glob(filepath.Join(tmp, "prescient-bench-*"))
			return m
		}
		for end := time.Now().Add(30 * time.Second); len(scratch()) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				_ = cmd.Process.Kill()
				t.Fatalf("bench made no scratch file in %s within 30s", tmp)
			}
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if err == nil || !strings.Contains(stderr.String(), "bench: interrupted by a signal") {
			t.Errorf("bench sent %v: %v, stderr %q; want it to fail saying it was interrupted", sig, err, stderr.String())
		}
		if strings.Contains(stderr.String(), "signal: bench:") {
			t.Errorf("bench sent %v names itself twice: %q", sig, stderr.String())
		}
		if left := scratch(); len(left) != 0 {
			t.Errorf("bench sent %v left its scratch database behind: %v", sig, left)
		}
	}
}
