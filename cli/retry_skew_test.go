package cli

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/history"
)

// Clock skew the other way round: order/1 failed on web-1 (history id 1),
// was retried, and failed again on web-2, whose clock runs an hour behind
// (history id 2, the job's latest end, with the older finished_at). retry
// reads its failed records newest first by finished_at, so with --limit 1
// (or a --since window the slow clock's time falls outside) it reads record
// 1 only; it then found record 2 with a higher id and skipped the job as
// "finished again since (failed)" (found by a review). It now retries from
// the job's latest end when that is a failure (Store.HistoryLatest).
func TestRetryLatestFailureWrittenByASlowerClock(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		importHistory(t, st, &history.Record{ID: 1, Entity: "order", Key: "1", Check: "order_unshipped",
			Outcome: history.Failed, FailureCount: 5, LastError: "boom on web-1",
			FinishedAt: now.Add(-10 * time.Minute), FinishedBy: "web-1"})
		importHistory(t, st, &history.Record{ID: 2, Entity: "order", Key: "1", Check: "order_unshipped",
			Outcome: history.Failed, FailureCount: 5, LastError: "boom on web-2",
			FinishedAt: now.Add(-70 * time.Minute), FinishedBy: "web-2"})

		for _, args := range [][]string{{"retry", "--dry-run", "--limit", "1"}, {"retry", "--dry-run", "--since", "30m"}} {
			out := h.mustRun(args...)
			if _, err := st.Driver().JobGet(context.Background(), "order", "1", "order_unshipped"); err == nil {
				t.Fatalf("a dry run scheduled a job")
			}
			wantContains(t, args[len(args)-2]+" "+args[len(args)-1], out, "would retry (--dry-run: nothing scheduled) 1 job(s)")
		}
	})
}
