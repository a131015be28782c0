package prescient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// A job named by attempts left behind (checks that started and never
// finished: crashes) runs in a transaction of its own that settles those
// attempts when it commits. When shutdown interrupts its check, the job is
// to be "released untouched" (README): its check did not finish. But the
// transaction still committed ApplyParams.Settled with no decision for the
// job, and so erased the crashes the job was charged with: a job two crashes
// from max_unfinished 3 (run alone because one more crash would condemn it)
// was back to zero, and after its third crash it ran again instead of
// ending failed (found by a review). Only the jobs whose checks finished
// are settled now.
func TestInterruptedSuspectKeepsItsCrashes(t *testing.T) {
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	started := make(chan struct{}, 1)
	var runs atomic.Int32
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if runs.Add(1) == 1 {
			started <- struct{}{}
			<-ctx.Done() // interrupted by shutdown
			return time.Time{}, ctx.Err()
		}
		return time.Time{}, writeAlert(ctx, j)
	}
	c := h.client(clk, register(t, "c", check, nil), nil) // MaxUnfinished: default 3
	const at = "2026-03-10T10:15:00Z"
	j := schedule(t, c, "poison", "c", at)
	// Two crashes while its check ran.
	leaveAttempt(t, h, ts(at), j)
	leaveAttempt(t, h, ts(at), j)

	clk.Set(at)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.FireSlot(ctx, ts(at))
		done <- err
	}()
	<-started
	cancel() // shutdown while the check runs
	<-done
	if p := wantPending(t, c, "poison", "c"); p.CheckCount != 0 || p.FailureCount != 0 {
		t.Fatalf("setup: after the interrupted run: %+v, want it untouched", p)
	}
	if ids := attemptsNaming(t, h); len(ids) < 2 {
		t.Errorf("attempts naming the job after a run interrupted by shutdown: %v, want its 2 crashes kept (its check did not finish)", ids)
	}

	// Its third crash.
	leaveAttempt(t, h, ts(at), j)
	fire(t, c, at)
	if runs.Load() != 1 {
		t.Errorf("after 3 crashes (max_unfinished 3) the check ran again (%d runs in all), want it ended failed without running", runs.Load())
	}
	recs := historyOf(t, c, "poison")
	if len(recs) != 1 || recs[0].Outcome != history.Failed {
		var got []history.Outcome
		for _, r := range recs {
			got = append(got, r.Outcome)
		}
		t.Errorf("history outcomes %v, want [failed]", got)
	}
}
