package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
)

// Two operators run `prescient retry` at the same time (or one runs it while
// an application schedules the job anew): each reads that the job is not
// pending, then schedules it with keep. The second schedule finds the job
// pending and keeps it, scheduling nothing, yet both commands listed the
// job as retried (found by a review). The jobs retried, summed over the two
// commands, must be the jobs scheduled: one each; the other is skipped,
// "pending (scheduled meanwhile)".
func TestConcurrentRetriesReportEachJobOnce(t *testing.T) {
	t.Parallel()
	const n = 300
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		finished := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
		recs := make([]*history.Record, n)
		for i := range recs {
			recs[i] = &history.Record{ID: int64(i + 1), Entity: "order", Key: fmt.Sprint(i), Check: "order_unshipped",
				Outcome: history.Failed, FirstCheckAt: past, LastCheckAt: past, CheckCount: 0, FailureCount: 5,
				LastError: "boom", CreatedAt: past, FinishedAt: finished.Add(time.Duration(i) * time.Millisecond), FinishedBy: "web-1"}
		}
		if err := st.Driver().HistoryImport(ctx, nil, recs); err != nil {
			t.Fatal(err)
		}
		var (
			wg  sync.WaitGroup
			res [2]prescient.RetryResult
			out [2]string
			err [2]error
		)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i], _, err[i] = h.runCtx(ctx, "retry", "--limit", "1000", "--json")
			}()
		}
		wg.Wait()
		for i := range 2 {
			if err[i] != nil {
				t.Fatalf("retry #%d: %v\n%s", i, err[i], out[i])
			}
			oneJSON(t, "retry --json", out[i], &res[i])
		}
		jobs, jerr := st.Driver().JobsExport(ctx, 0, 10*n)
		if jerr != nil {
			t.Fatal(jerr)
		}
		retried := len(res[0].Retried) + len(res[1].Retried)
		both := 0
		seen := map[string]int{}
		for _, r := range res {
			for _, j := range r.Retried {
				seen[j.Failed.Key]++
				if seen[j.Failed.Key] == 2 {
					both++
				}
			}
		}
		if len(jobs) != n || retried != n {
			var ex []string
			for k, c := range seen {
				if c > 1 && len(ex) < 5 {
					ex = append(ex, "order/"+k)
				}
			}
			t.Fatalf("%d jobs scheduled, but the two retries reported %d and %d retried (%d jobs reported retried by both, e.g. %s), skipped %d and %d",
				len(jobs), len(res[0].Retried), len(res[1].Retried), both, strings.Join(ex, ", "), len(res[0].Skipped), len(res[1].Skipped))
		}
	})
}

// retry told "finished again since" by the history records' finished_at,
// times written by whichever host finished the job. A job retried, then
// cancelled from a host whose clock runs a minute behind the server that
// failed it, had a later end with an earlier finished_at: a second retry
// did not see it, and scheduled the cancelled job again (found by a review;
// the README: "running retry twice never runs a job twice"). Ends are
// ordered by history id now: a job scheduled anew gets a higher one.
func TestRetryAfterALaterEndWrittenByASlowerClock(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		importHistory(t, st, &history.Record{ID: 1, Entity: "order", Key: "1", Check: "order_unshipped",
			Outcome: history.Failed, FailureCount: 5, LastError: "boom",
			FinishedAt: time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)})
		wantContains(t, "first retry", h.mustRun("retry"), "retried 1 job(s)")

		// The operator's laptop, a minute behind, cancels the retried job.
		slow := func() time.Time { return time.Now().Add(-time.Minute) }
		var out syncBuffer
		root := NewRootCommand(&Opts{Checks: nil, Out: &out, Err: &out, Now: slow, lookupEnv: envOf(h.env)})
		root.SetArgs([]string{"--config", h.config, "cancel", "order", "1", "order_unshipped"})
		if err := root.ExecuteContext(ctx); err != nil {
			t.Fatalf("cancel: %v\n%s", err, out.String())
		}
		wantContains(t, "cancel", out.String(), "cancelled 1 job(s)")

		got := h.mustRun("retry")
		if _, err := st.Driver().JobGet(ctx, "order", "1", "order_unshipped"); err == nil {
			t.Fatalf("the second retry scheduled order/1 again, though it was retried and then cancelled since it failed:\n%s", got)
		}
		wantContains(t, "second retry", got, "finished again since (cancelled)")
	})
}
