package prescient_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlcheck"
)

// A job of another entity than the one its check watches (checks.Opts.Entity)
// can reach the pending table through a client that does not know the check
// (an application's, with no checks registered): the server does not call
// the check with it, which would look the key up in the wrong place. The job
// fails, saying why, and ends in history as failed, as any failing job does;
// the jobs of the right entity run.
func TestWrongEntityJobFailsWithoutCallingTheCheck(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var mu sync.Mutex
		var called []string
		note := func(j *checks.Job) {
			mu.Lock()
			defer mu.Unlock()
			called = append(called, j.Entity+"/"+j.Key)
		}
		reg := &checks.Registry{}
		if err := reg.Register("invoice_unsent", func(_ context.Context, j *checks.Job) (time.Time, error) {
			note(j)
			return time.Time{}, nil
		}, &checks.Opts{Entity: "invoice"}); err != nil {
			t.Fatal(err)
		}
		if err := reg.RegisterBatch("invoice_unpaid", func(_ context.Context, js []*checks.Job) ([]checks.Result, error) {
			for _, j := range js {
				note(j)
			}
			return make([]checks.Result, len(js)), nil
		}, &checks.Opts{Entity: "invoice"}); err != nil {
			t.Fatal(err)
		}
		server := h.client(clk, reg, func(cfg *prescient.Config) { cfg.MaxFailures = 1 })
		app := h.client(clk, &checks.Registry{}, nil)
		at := ts("2026-03-10T10:15:00Z")
		scheduleEach(t, app,
			prescient.ScheduleParams{Entity: "order", Key: "1", Check: "invoice_unsent", At: at},
			prescient.ScheduleParams{Entity: "invoice", Key: "2", Check: "invoice_unsent", At: at},
			prescient.ScheduleParams{Entity: "order", Key: "3", Check: "invoice_unpaid", At: at},
			prescient.ScheduleParams{Entity: "invoice", Key: "4", Check: "invoice_unpaid", At: at})
		if _, err := server.Schedule(context.Background(), prescient.ScheduleParams{Entity: "order", Key: "5", Check: "invoice_unsent", At: at}); !errors.Is(err, prescient.ErrWrongEntity) {
			t.Errorf("the server's client scheduling order/5 for invoice_unsent: %v, want ErrWrongEntity", err)
		}
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, server, "2026-03-10T10:15:00Z")
		if rec.Checked != 4 || rec.Failures != 2 {
			t.Errorf("slot record %+v: want 4 checked, 2 of them failures (the jobs of entity order)", rec)
		}
		mu.Lock()
		got := strings.Join(called, " ")
		mu.Unlock()
		if got != "invoice/2 invoice/4" && got != "invoice/4 invoice/2" {
			t.Errorf("the checks were called with %q; want the invoice jobs only", got)
		}
		for _, tc := range []struct{ entity, key, check string }{{"order", "1", "invoice_unsent"}, {"order", "3", "invoice_unpaid"}} {
			recs, err := server.History(context.Background(), history.Filter{Entity: tc.entity, Key: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			want := "check " + tc.check + " watches entity invoice only, and this job is of entity order"
			if len(recs) != 1 || recs[0].Outcome != history.Failed || !strings.Contains(recs[0].LastError, want) {
				t.Errorf("history of %s/%s: %+v; want one record, failed, saying %q", tc.entity, tc.key, recs, want)
			}
		}
		for _, key := range []string{"2", "4"} {
			recs, err := server.History(context.Background(), history.Filter{Entity: "invoice", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Outcome != history.Done {
				t.Errorf("history of invoice/%s: %+v; want one record, done", key, recs)
			}
		}
	})
}

// A batch check's group that stops for GroupDuration after refusing jobs of
// another entity hands the batch's own jobs to a next transaction: none is
// left due in a slot the record calls complete (review: the group once
// passed on the first job of each call not made, as if each had one).
func TestWrongEntityBatchGroupCutByGroupDuration(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		reg := &checks.Registry{}
		if err := reg.RegisterBatch("invoice_unpaid", func(_ context.Context, js []*checks.Job) ([]checks.Result, error) {
			return make([]checks.Result, len(js)), nil
		}, &checks.Opts{Entity: "invoice"}); err != nil {
			t.Fatal(err)
		}
		server := h.client(clk, reg, func(cfg *prescient.Config) { cfg.GroupDuration = time.Nanosecond })
		app := h.client(clk, &checks.Registry{}, nil)
		at := ts("2026-03-10T10:15:00Z")
		scheduleEach(t, app,
			prescient.ScheduleParams{Entity: "order", Key: "1", Check: "invoice_unpaid", At: at},
			prescient.ScheduleParams{Entity: "invoice", Key: "2", Check: "invoice_unpaid", At: at},
			prescient.ScheduleParams{Entity: "invoice", Key: "3", Check: "invoice_unpaid", At: at},
			prescient.ScheduleParams{Entity: "invoice", Key: "4", Check: "invoice_unpaid", At: at})
		clk.Set("2026-03-10T10:15:00Z")
		if rec := fire(t, server, "2026-03-10T10:15:00Z"); rec.Checked != 4 {
			t.Errorf("slot record %+v: want all 4 jobs checked", rec)
		}
		for _, key := range []string{"2", "3", "4"} {
			recs, err := server.History(context.Background(), history.Filter{Entity: "invoice", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 || recs[0].Outcome != history.Done {
				t.Errorf("history of invoice/%s: %+v; want one record, done", key, recs)
			}
		}
	})
}

// scheduleEach schedules every job of ps through c (an application's client
// that registers no checks takes any entity).
func scheduleEach(t *testing.T, c *prescient.Client, ps ...prescient.ScheduleParams) {
	t.Helper()
	for _, p := range ps {
		if _, err := c.Schedule(context.Background(), p); err != nil {
			t.Fatalf("scheduling %+v: %v", p, err)
		}
	}
}

// TestWrongEntityFailsAtOnce: a job of another entity than its check's
// (scheduled by a client that does not know the check) can never be
// checked, and was retried max_failures times, hours on a 15-minute grid,
// though the README says it fails at once (found by a review). Its failure
// is permanent: the job ends failed at the first firing. A declared check
// is turned away the same way, before its query runs.
func TestWrongEntityFailsAtOnce(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	dc, err := sqlcheck.New(sqlcheck.Spec{Name: "intkey", Entity: "order",
		Query:  `SELECT id AS key FROM orders WHERE id = ANY($1)`,
		Stages: []sqlcheck.Stage{{After: 0, Event: "order.seen"}}},
		&sqlcheck.Statement{Dialect: sqlcheck.Postgres, KeysType: "bigint[]", Columns: []sqlcheck.Column{{Name: "key", Type: "bigint", TypeKnown: true}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	if err := dc.Register(reg); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	if err := reg.Register("gocheck", noop, &checks.Opts{Entity: "order"}); err != nil {
		t.Fatal(err)
	}
	server := h.client(clk, reg, func(cfg *prescient.Config) { cfg.MaxFailures = 3 })
	app := h.client(clk, &checks.Registry{}, nil)
	scheduleEach(t, app,
		prescient.ScheduleParams{Entity: "invoice", Key: "7", Check: "intkey", At: ts("2026-03-10T10:15:00Z")},
		prescient.ScheduleParams{Entity: "invoice", Key: "8", Check: "gocheck", At: ts("2026-03-10T10:15:00Z")})
	clk.Set("2026-03-10T10:15:00Z")
	fire(t, server, "2026-03-10T10:15:00Z")
	for _, k := range []string{"7", "8"} {
		recs, err := server.History(context.Background(), history.Filter{Entity: "invoice", Key: k})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 1 || recs[0].Outcome != history.Failed || !strings.Contains(recs[0].LastError, "not retried") {
			t.Errorf("invoice %s: history %v; want failed at once, not retried", k, recs)
		}
	}
}
