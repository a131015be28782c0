package prescient_test

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// slowAlert writes the job's alert and then takes d, as a check calling a
// slow service does (well within its runtime guard).
func slowAlert(d time.Duration) checks.Func {
	return func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if _, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key); err != nil {
			return time.Time{}, err
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
		return time.Time{}, nil
	}
}

// bounded.go: a call that takes a pool connection may wait for one, which
// a running group holds for up to its checks' runtime guard and
// GroupDuration, so it is bounded by that much more than server_timeout: a
// pool smaller than Workers (which the client warns of) makes groups wait,
// not fail. The first version gave that margin to Begin alone, but a group
// records its attempt (AttemptStart) first, which also takes a pool
// connection: with one connection and two workers, the second group waited
// for the first group's connection (its check takes 2.5s, within its 10s
// runtime guard), and its AttemptStart gave up after the 1s server timeout,
// leaving its job due and the slot incomplete (found by a review). (The same holds for any pool an application shares
// with the store, and behind PgBouncer in transaction mode with fewer
// server connections than workers: the wait is for a connection, not for
// an answer.)
func TestPoolSmallerThanWorkersWaitsNotFails(t *testing.T) {
	h := openPostgresConns(t, 1)
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "unshipped", slowAlert(2500*time.Millisecond), nil), func(cfg *prescient.Config) {
		cfg.Workers = 2
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, time.Second
		cfg.Guards.Runtime = 10 * time.Second
	})
	fireTwoSlowJobs(t, c, clk, "a pool of 1 connection and 2 workers")
}

// fireTwoSlowJobs fires a slot of two jobs of check "unshipped" and wants
// both checked, and done once each.
func fireTwoSlowJobs(t *testing.T, c *prescient.Client, clk *clock, setting string) {
	t.Helper()
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
	schedule(t, c, "2", "unshipped", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")
	rec, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
	if err != nil {
		t.Errorf("FireSlot with %s failed: %v", setting, err)
	}
	if rec != nil && rec.Checked != 2 {
		t.Errorf("the firing checked %d jobs, want 2", rec.Checked)
	}
	for _, key := range []string{"1", "2"} {
		if recs := historyOf(t, c, key); len(recs) != 1 || recs[0].Outcome != history.Done {
			t.Errorf("order %s: history %+v, want done once", key, recs)
		}
	}
}

// The same with a pool of exactly Workers connections (the client warns
// of it but runs): both groups hold a connection while their checks run,
// and the firing lists its next page of due jobs meanwhile (JobsDue), which
// waited for a connection and gave up after the 1s server timeout: the
// firing failed ("list due jobs: ... no answer from the database within 1s:
// its connection is dropped", which is not what happened), the slot stays
// incomplete (Tick would make the server not ready), though both jobs ran
// and committed. Before the change it waited for a group to end. (The
// driver below only makes the listing come once both checks have started,
// a few milliseconds, so that it meets the pool full every time.)
func TestPoolOfWorkersListsTheNextPage(t *testing.T) {
	h := openPostgresConns(t, 2)
	started := make(chan struct{}, 2)
	h.store = wrappedStore{Store: h.store, drv: &hungLateListing{Driver: h.store.Driver(), started: started}}
	slow := slowAlert(2500 * time.Millisecond)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		started <- struct{}{}
		return slow(ctx, j)
	}
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "unshipped", check, nil), func(cfg *prescient.Config) {
		cfg.Workers = 2
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, time.Second
		cfg.Guards.Runtime = 10 * time.Second
	})
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
	schedule(t, c, "2", "unshipped", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")
	rec, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
	if err != nil {
		t.Errorf("FireSlot with a pool of Workers (2) connections failed: %v", err)
	}
	if rec == nil || !rec.Complete() {
		t.Errorf("the slot is left incomplete: %+v", rec)
	}
	for _, key := range []string{"1", "2"} {
		if recs := historyOf(t, c, key); len(recs) != 1 || recs[0].Outcome != history.Done {
			t.Errorf("order %s: history %+v, want done once", key, recs)
		}
	}
}

// hungLateListing lists a next page of due jobs (AfterID > 0) only once
// both checks have started (or after 500ms).
type hungLateListing struct {
	driver.Driver
	started chan struct{}
}

func (d *hungLateListing) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	if p.AfterID > 0 {
		timeout := time.After(500 * time.Millisecond)
		for range 2 {
			select {
			case <-d.started:
			case <-timeout:
			}
		}
	}
	return d.Driver.JobsDue(ctx, p)
}

// The margin a pool call waits for a connection counts the largest runtime
// guard: a check may set its own, larger than the engine's. The bound
// counted only the engine's (1s here): the second group's AttemptStart
// waited for the first group's connection (its check takes 2.5s, within
// its own 10s guard), gave up after 1s + 1s + 200ms, and left its job due
// and the firing failed.
func TestPoolWaitCountsACheckOwnRuntimeGuard(t *testing.T) {
	h := openPostgresConns(t, 1)
	clk := newClock("2026-03-10T10:00:00Z")
	own := &checks.Opts{Guards: guards.Limits{Runtime: 10 * time.Second}}
	c := h.client(clk, register(t, "unshipped", slowAlert(2500*time.Millisecond), own), func(cfg *prescient.Config) {
		cfg.Workers = 2
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, time.Second
		cfg.Guards.Runtime = time.Second
		cfg.GroupDuration = 200 * time.Millisecond
	})
	fireTwoSlowJobs(t, c, clk, "a pool of 1 connection, 2 workers and a check's own 10s runtime guard")
}
