package prescient_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// TestJobsList lists pending jobs through every filter and pages through
// them, on every store.
func TestJobsList(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, &checks.Registry{}, nil)
		// Slots 10:15 (keys 0-4), 10:30 (5-9); check a for even keys, b for odd.
		for i := range 10 {
			at := "2026-03-10T10:15:00Z"
			if i >= 5 {
				at = "2026-03-10T10:30:00Z"
			}
			schedule(t, c, fmt.Sprint(i), []string{"a", "b"}[i%2], at)
		}
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "user", Key: "u1", Check: "a", At: ts("2026-03-10T11:00:00Z")}); err != nil {
			t.Fatal(err)
		}
		keys := func(p prescient.JobsParams) string {
			t.Helper()
			jobs, err := c.Jobs(ctx, p)
			if err != nil {
				t.Fatalf("%+v: %v", p, err)
			}
			var ks []string
			for _, j := range jobs {
				ks = append(ks, j.Entity+"/"+j.Key+"/"+j.Check)
			}
			return strings.Join(ks, " ")
		}
		for _, tc := range []struct {
			p    prescient.JobsParams
			want string
		}{
			{prescient.JobsParams{Limit: 3}, "order/0/a order/1/b order/2/a"},
			{prescient.JobsParams{Check: "b"}, "order/1/b order/3/b order/5/b order/7/b order/9/b"},
			{prescient.JobsParams{Entity: "user"}, "user/u1/a"},
			{prescient.JobsParams{Entity: "order", Key: "7"}, "order/7/b"},
			{prescient.JobsParams{Slot: ts("2026-03-10T10:30:00Z"), Check: "a"}, "order/6/a order/8/a"},
			{prescient.JobsParams{Overdue: true}, ""},
		} {
			if got := keys(tc.p); got != tc.want {
				t.Errorf("%+v: got %q, want %q", tc.p, got, tc.want)
			}
		}
		// Paging: After continues where the last page stopped, across slots.
		var all []string
		var after *prescient.Job
		for {
			page, err := c.Jobs(ctx, prescient.JobsParams{Limit: 4, After: after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for _, j := range page {
				all = append(all, j.Key)
			}
			after = page[len(page)-1]
		}
		if got := strings.Join(all, ","); got != "0,1,2,3,4,5,6,7,8,9,u1" {
			t.Errorf("paged listing %s", got)
		}
		// At 10:40 the 10:15 and 10:30 slots have begun: their jobs are overdue.
		clk.Set("2026-03-10T10:40:00Z")
		if got := keys(prescient.JobsParams{Overdue: true, Check: "a"}); got != "order/0/a order/2/a order/4/a" {
			t.Errorf("overdue at 10:40: %q", got)
		}
		for _, bad := range []struct {
			p    prescient.JobsParams
			want string
		}{
			{prescient.JobsParams{Key: "1"}, "key needs an entity"},
			{prescient.JobsParams{Slot: ts("2026-03-10T10:20:00Z")}, "not on the grid"},
			{prescient.JobsParams{Limit: prescient.JobsLimitMax + 1}, "out of range"},
			{prescient.JobsParams{Check: "no such"}, "check"},
		} {
			if _, err := c.Jobs(ctx, bad.p); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%+v: error %v, want one containing %q", bad.p, err, bad.want)
			}
		}
	})
}

// TestRetry schedules again the jobs that ended failed, with their payload,
// and only once: a job pending again or finished again since is skipped.
func TestRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		var broken atomic.Bool
		broken.Store(true)
		var (
			mu       sync.Mutex
			payloads []string
		)
		flaky := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if broken.Load() {
				return time.Time{}, errors.New("carrier API down")
			}
			mu.Lock()
			defer mu.Unlock()
			payloads = append(payloads, string(j.Payload))
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "flaky", flaky, nil), func(c *prescient.Config) { c.MaxFailures = 1 })
		for _, k := range []string{"1", "2"} {
			if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: k, Check: "flaky",
				At: ts("2026-03-10T10:15:00Z"), Payload: map[string]string{"carrier": "ups-" + k}}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		wantOutcome(t, c, "1", history.Failed, 0)

		// A dry run says what it would do and does nothing.
		dry, err := c.Retry(ctx, prescient.RetryParams{Key: "1", Entity: "order", DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(dry.Retried) != 1 || dry.Retried[0].Job != nil {
			t.Fatalf("dry run: %+v", dry)
		}
		if _, err := c.Job(ctx, "order", "1", "flaky"); !errors.Is(err, prescient.ErrNotFound) {
			t.Fatalf("a dry run scheduled the job: %v", err)
		}

		res, err := c.Retry(ctx, prescient.RetryParams{Check: "flaky"})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Retried) != 2 || len(res.Skipped) != 0 {
			t.Fatalf("retry: %d retried, %d skipped", len(res.Retried), len(res.Skipped))
		}
		for _, r := range res.Retried {
			if want := ts("2026-03-10T10:30:00Z"); r.Job == nil || !r.Job.NextCheckAt.Equal(want) {
				t.Fatalf("retried %s: %+v, want it due at %s", r.Failed.Key, r.Job, want)
			}
			var p map[string]string
			if err := json.Unmarshal(r.Job.Payload, &p); err != nil || p["carrier"] != "ups-"+r.Failed.Key {
				t.Fatalf("retried %s with payload %s", r.Failed.Key, r.Job.Payload)
			}
		}
		// Retrying again while they are pending does nothing.
		again, err := c.Retry(ctx, prescient.RetryParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Retried) != 0 || len(again.Skipped) != 2 || again.Skipped[0].Skipped != "pending" {
			t.Fatalf("second retry: %+v", again)
		}
		// Once they have run and finished, their old failures are not retried.
		broken.Store(false)
		clk.Set("2026-03-10T10:30:00Z")
		fire(t, c, "2026-03-10T10:30:00Z")
		if len(payloads) != 2 {
			t.Fatalf("retried checks ran %d times, want 2", len(payloads))
		}
		after, err := c.Retry(ctx, prescient.RetryParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Retried) != 0 || len(after.Skipped) != 2 || !strings.HasPrefix(after.Skipped[0].Skipped, "finished again since (done)") {
			t.Fatalf("retry after the jobs finished: %+v", after.Skipped[0])
		}
		if _, err := c.Retry(ctx, prescient.RetryParams{Key: "1"}); err == nil || !strings.Contains(err.Error(), "key needs an entity") {
			t.Fatalf("a key without entity: %v", err)
		}
	})
}

// TestRetrySkipsAJobItsCheckNoLongerTakes: a failed job whose check is now
// registered for another entity is skipped, saying so, and the others are
// retried; a dry run says the same. The first such job stopped the whole
// retry, after a dry run had promised it (found by a trial of bad input).
func TestRetrySkipsAJobItsCheckNoLongerTakes(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		failing := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, errors.New("down") }
		before := h.client(clk, register(t, "watch", failing, nil), func(c *prescient.Config) { c.MaxFailures = 1 })
		for _, e := range []string{"order", "item"} {
			if _, err := before.Schedule(ctx, prescient.ScheduleParams{Entity: e, Key: "1", Check: "watch", At: ts("2026-03-10T10:15:00Z")}); err != nil {
				t.Fatal(err)
			}
		}
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, before, "2026-03-10T10:15:00Z")

		// The check now watches items only.
		after := h.client(clk, register(t, "watch", failing, &checks.Opts{Entity: "item"}), nil)
		for _, dry := range []bool{true, false} {
			res, err := after.Retry(ctx, prescient.RetryParams{Check: "watch", DryRun: dry})
			if err != nil {
				t.Fatalf("retry (dry run %v): %v", dry, err)
			}
			if len(res.Retried) != 1 || res.Retried[0].Failed.Entity != "item" {
				t.Fatalf("retry (dry run %v) retried %d job(s), want item/1 only: %+v", dry, len(res.Retried), res)
			}
			if len(res.Skipped) != 1 || res.Skipped[0].Failed.Entity != "order" ||
				!strings.Contains(res.Skipped[0].Skipped, "cannot schedule") || !strings.Contains(res.Skipped[0].Skipped, "watches entity item only") {
				t.Fatalf("retry (dry run %v) skipped %+v, want order/1 saying its check watches items only", dry, res.Skipped)
			}
		}
		if _, err := after.Job(ctx, "item", "1", "watch"); err != nil {
			t.Fatalf("item/1 not pending after the retry: %v", err)
		}
	})
}
