package prescient_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// countingHistoryStore hands the engine a driver that counts the history records
// HistoryList returns.
type countingHistoryStore struct {
	prescient.Store
	read *atomic.Int64
}

func (s countingHistoryStore) Driver() driver.Driver {
	return historyCounter{s.Store.Driver(), s.read}
}

type historyCounter struct {
	driver.Driver
	read *atomic.Int64
}

func (d historyCounter) HistoryList(ctx context.Context, f history.Filter) ([]*history.Record, error) {
	recs, err := d.Driver.HistoryList(ctx, f)
	d.read.Add(int64(len(recs)))
	return recs, err
}

// retrySkip read every history record of each failed job (up to
// history.LimitMax, full rows with payload and error) to find one with a
// higher id: a job that ran 5,000 times and failed last cost Retry 5,000
// rows for one failed record (found by a review; 7.6s for 100 such jobs
// with 10,000 ends each on SQLite). It reads the job's latest end alone now
// (Store.HistoryLatest), and no history list.
func TestRetryReadsOneRecordPerJob(t *testing.T) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "prescient.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const ends = 5000
	start := time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Microsecond)
	recs := make([]*history.Record, ends)
	for i := range recs {
		out := history.Done
		if i == ends-1 {
			out = history.Failed
		}
		recs[i] = &history.Record{ID: int64(i + 1), Entity: "order", Key: "1", Check: "order_unshipped", Outcome: out,
			FailureCount: 5, LastError: "boom", FirstCheckAt: start, CreatedAt: start, FinishedBy: "web-1",
			FinishedAt: start.Add(time.Duration(i) * time.Second)}
	}
	if err := s.Driver().HistoryImport(ctx, nil, recs); err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	c, err := prescient.NewClient(countingHistoryStore{s, &read}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Retry(ctx, prescient.RetryParams{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Retried) != 1 {
		t.Fatalf("retried %d, skipped %d", len(res.Retried), len(res.Skipped))
	}
	// 1 record for the failed list, then what retrySkip reads.
	if n := read.Load() - 1; n > 2 {
		t.Errorf("Retry read %s history records to judge one failed record (it needs the latest end only)", fmt.Sprint(n))
	}
}
