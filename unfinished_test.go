package prescient_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
)

// leaveAttempt records an attempt naming jobs, as a server that died while
// their checks ran would have left it.
func leaveAttempt(t *testing.T, h *harness, slot time.Time, jobs ...*prescient.Job) {
	t.Helper()
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	if _, err := h.store.Driver().AttemptStart(context.Background(),
		&driver.AttemptStartParams{Server: "dead", Slot: slot, StartedAt: slot, IDs: ids}); err != nil {
		t.Fatal(err)
	}
}

// attemptsNaming returns the ids of jobs named by attempts left in the store,
// sorted, with repeats.
func attemptsNaming(t *testing.T, h *harness) []int64 {
	t.Helper()
	left, err := h.store.Driver().AttemptsLeft(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, a := range left {
		ids = append(ids, a.JobIDs...)
	}
	slices.Sort(ids)
	return ids
}

// A check that kills its server leaves behind the attempt its group
// recorded. The next firing runs each job it names in a transaction of its
// own, and alone (one at a time, with nothing else of the slot running) when
// one more crash would condemn it, so that the jobs that merely shared the
// culprit's group finish and clear themselves; a job named by MaxUnfinished
// attempts ends failed without running.
func TestChecksThatNeverFinished(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var (
			running, ran atomic.Int32
			mu           sync.Mutex
			crowded      []string // suspects to run alone that ran beside another check
			poisonRan    bool
		)
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			n := running.Add(1)
			defer running.Add(-1)
			ran.Add(1)
			time.Sleep(5 * time.Millisecond) // long enough for others to start beside it
			mu.Lock()
			defer mu.Unlock()
			if j.Key == "poison" {
				poisonRan = true
			}
			if j.Key == "suspect-2" && n != 1 {
				crowded = append(crowded, j.Key)
			}
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) { c.Workers, c.GroupSize = 4, 1 })
		const at = "2026-03-10T10:15:00Z"
		slot := ts(at)
		jobs := map[string]*prescient.Job{}
		for _, k := range []string{"clean-1", "suspect-1", "clean-2", "poison", "suspect-2", "clean-3", "clean-4"} {
			jobs[k] = schedule(t, c, k, "c", at)
		}
		// The poison job crashed its server three times (the default
		// MaxUnfinished): first in a group with both suspects, then on its
		// own beside suspect-2, then alone. Suspect-2, which one more crash
		// would condemn, must run alone; suspect-1 may run beside others.
		leaveAttempt(t, h, slot, jobs["suspect-1"], jobs["poison"], jobs["suspect-2"])
		leaveAttempt(t, h, slot, jobs["poison"])
		leaveAttempt(t, h, slot, jobs["suspect-2"])
		leaveAttempt(t, h, slot, jobs["poison"])

		clk.Set(at)
		rec := fire(t, c, at)
		if rec.Checked != 7 || rec.Outcomes[history.Done] != 6 || rec.Outcomes[history.Failed] != 1 {
			t.Errorf("slot record %+v, want 6 done and 1 failed", rec)
		}
		if poisonRan || ran.Load() != 6 {
			t.Errorf("checks run: %d (poison ran: %v), want the 6 others only", ran.Load(), poisonRan)
		}
		if len(crowded) > 0 {
			t.Errorf("suspects %v ran beside other checks, want each alone", crowded)
		}
		r := wantOutcome(t, c, "poison", history.Failed, 0)
		if !strings.Contains(r.LastError, "started 3 times and never finished") {
			t.Errorf("poison's last error %q, want it to say its check never finished", r.LastError)
		}
		for k := range jobs {
			if k != "poison" {
				wantOutcome(t, c, k, history.Done, 1)
			}
		}
		if ids := attemptsNaming(t, h); len(ids) != 0 {
			t.Errorf("attempts left after the slot: jobs %v, want none", ids)
		}
	})
}

// A slot that runs normally leaves no attempt behind, with or without
// savepoints, nor does a failure that makes an optimistic group run again.
func TestAttemptsEndWithTheirGroup(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if err := writeAlert(ctx, j); err != nil {
				return time.Time{}, err
			}
			if j.Key == "3" {
				return time.Time{}, context.DeadlineExceeded
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, nil), oneGroup)
		for _, k := range []string{"1", "2", "3", "4"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		rec := fire(t, c, "2026-03-10T10:15:00Z")
		if rec.Outcomes[history.Done] != 3 || rec.Failures != 1 {
			t.Errorf("slot record %+v, want 3 done and 1 failure", rec)
		}
		if ids := attemptsNaming(t, h); len(ids) != 0 {
			t.Errorf("attempts left after the slot: jobs %v, want none", ids)
		}
	})
}

// After a server was killed with many checks in flight, their jobs (named
// by one attempt each) run each in a transaction of its own but side by
// side, up to Workers at once, not one after the other. (PostgreSQL only:
// SQLite runs one group at a time anyway.)
func TestSuspectsRunSideBySide(t *testing.T) {
	t.Parallel()
	func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		var (
			running, most atomic.Int32
			two           = make(chan struct{}) // closed once two checks run at once
			once          sync.Once
		)
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if n >= 2 {
				once.Do(func() { close(two) })
			}
			// Wait for a second check to start beside this one: run one
			// after the other, they never do, and each gives up after a
			// second.
			select {
			case <-two:
			case <-time.After(time.Second):
			}
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), func(c *prescient.Config) { c.Workers = 4 })
		const at = "2026-03-10T10:15:00Z"
		var killed []*prescient.Job
		for i := range 8 {
			killed = append(killed, schedule(t, c, "k"+string(rune('0'+i)), "c", at))
		}
		leaveAttempt(t, h, ts(at), killed...)
		clk.Set(at)
		if rec := fire(t, c, at); rec.Outcomes[history.Done] != 8 {
			t.Fatalf("slot record %+v, want 8 done", rec)
		}
		if most.Load() < 2 {
			t.Errorf("at most %d check(s) ran at once, want the suspects side by side", most.Load())
		}
		if ids := attemptsNaming(t, h); len(ids) != 0 {
			t.Errorf("attempts left after the slot: jobs %v, want none", ids)
		}
	}(t, openPostgres(t))
}

// An attempt names the jobs its transaction claimed, not those it was given:
// a job another transaction holds (another server firing or sweeping the
// same slot) is skipped by the claim, and a crash of this group must not
// count against it. The attempt is narrowed to the jobs claimed while the
// transaction stays open. (PostgreSQL only: SQLite has one writer, so no
// claim skips a job another transaction holds.)
func TestAttemptNamesOnlyClaimedJobs(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	st := h.store.(*postgres.Store)
	clk := newClock("2026-03-10T10:00:00Z")
	named := make(chan []int64, 1)
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "a" {
			// On the engine's goroutine: errors go back as the check's.
			left, err := h.store.Driver().AttemptsLeft(ctx)
			if err != nil {
				return time.Time{}, err
			}
			var ids []int64
			for _, a := range left {
				ids = append(ids, a.JobIDs...)
			}
			slices.Sort(ids)
			select {
			case named <- ids:
			default: // a ran twice: the first run's list is the one checked
			}
		}
		return time.Time{}, writeAlert(ctx, j)
	}
	counter := &countingDriver{Driver: h.store.Driver()}
	h.store = wrappedStore{h.store, counter}
	c := h.client(clk, register(t, "c", check, nil), oneGroup)
	const at = "2026-03-10T10:15:00Z"
	a, b, cc := schedule(t, c, "a", "c", at), schedule(t, c, "b", "c", at), schedule(t, c, "c", "c", at)

	ctx := context.Background()
	other, err := st.Pool().Begin(ctx) // another server's transaction, holding b
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, "SELECT 1 FROM prescient_jobs WHERE id = $1 FOR UPDATE", b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Set(at)
	if rec := fire(t, c, at); rec.Outcomes[history.Done] != 2 {
		t.Fatalf("slot record %+v, want a and c done, b skipped", rec)
	}
	if got, want := <-named, []int64{a.ID, cc.ID}; !slices.Equal(got, want) {
		t.Errorf("while the checks ran, attempts named jobs %v, want only the claimed %v (not b, %d)", got, want, b.ID)
	}
	if ids := attemptsNaming(t, h); len(ids) != 0 {
		t.Errorf("attempts left after the slot: jobs %v, want none", ids)
	}
	// The attempt was narrowed beside the open transaction, which went on:
	// one transaction and one claim, not a rollback and a second claim.
	if b, cl := counter.begins.Load(), counter.claims.Load(); b != 1 || cl != 1 {
		t.Errorf("the group began %d transaction(s) and claimed %d time(s), want 1 and 1", b, cl)
	}
}

// A group that cannot narrow its attempt beside its open transaction (its
// connection is the pool's last: groups that all waited for another would
// wait for ever) rolls back and claims again, as on SQLite.
func TestAttemptNarrowedWithThePoolExhausted(t *testing.T) {
	t.Parallel()
	h := openPostgresConns(t, 1)
	st := h.store.(*postgres.Store)
	counter := &countingDriver{Driver: h.store.Driver()}
	h.store = wrappedStore{h.store, counter}
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		return time.Time{}, writeAlert(ctx, j)
	}, nil), func(c *prescient.Config) { c.Workers = 1 })
	const at = "2026-03-10T10:15:00Z"
	schedule(t, c, "a", "c", at)
	b := schedule(t, c, "b", "c", at)
	schedule(t, c, "c", "c", at)

	ctx := context.Background()
	var schema string
	if err := st.Pool().QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, st.Pool().Config().ConnConfig.ConnString()) // another server, holding b
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{schema, "prescient_jobs"}.Sanitize()+" WHERE id = $1 FOR UPDATE", b.ID); err != nil {
		t.Fatal(err)
	}
	clk.Set(at)
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rec, err := c.FireSlot(fctx, ts(at))
	if err != nil || rec.Outcomes[history.Done] != 2 {
		t.Fatalf("slot: %+v, %v; want a and c done, b skipped", rec, err)
	}
	if b, cl := counter.begins.Load(), counter.claims.Load(); b != 2 || cl != 2 {
		t.Errorf("the group began %d transaction(s) and claimed %d time(s), want 2 and 2 (rolled back, claimed again)", b, cl)
	}
	if ids := attemptsNaming(t, h); len(ids) != 0 {
		t.Errorf("attempts left after the slot: jobs %v, want none", ids)
	}
}

// The attempts left behind are counted when a slot starts; before a job is
// ended failed or run alone, they are counted again: the group of another
// server that named it may have finished since, deleting its attempt. An
// attempt recorded after the slot started (another server's group, most
// likely still running) does not count then, even when another attempt
// naming the same job ended meanwhile: a job one crash short of its limit
// still runs alone, and is not condemned by a group that never crashed.
func TestAttemptsCountedAgainBeforeCondemning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		left   int  // attempts naming x when the slot starts
		end    bool // the first of them ends while the first page runs
		record bool // another server records one naming x meanwhile
	}{
		{"one ended since", 3, true, false},
		{"one recorded since", 2, false, true},
		{"one ended and one recorded since", 3, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				clk := newClock("2026-03-10T10:00:00Z")
				var x *prescient.Job
				var ended int64
				const at = "2026-03-10T10:15:00Z"
				slot := ts(at)
				check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
					if j.Key != "c-000" {
						return time.Time{}, writeAlert(ctx, j)
					}
					if tc.end {
						if _, err := j.Tx.Exec(ctx, "DELETE FROM prescient_attempts WHERE id = $1", ended); err != nil {
							return time.Time{}, err
						}
					}
					if tc.record {
						var err error
						if h.name == "sqlite" {
							_, err = j.Tx.Exec(ctx, `INSERT INTO prescient_attempts (server, slot, started_at, job_ids) VALUES ('other', $1, $1, $2)`,
								slot.UnixMicro(), fmt.Sprintf("[%d]", x.ID))
						} else {
							_, err = j.Tx.Exec(ctx, `INSERT INTO prescient_attempts (server, slot, started_at, job_ids) VALUES ('other', $1, $1, $2)`,
								slot, []int64{x.ID})
						}
						if err != nil {
							return time.Time{}, err
						}
					}
					return time.Time{}, writeAlert(ctx, j)
				}
				c := h.client(clk, register(t, "c", check, nil), nil)
				// A first page of jobs (the engine lists 100 first), then x
				// on the next, named by attempts left behind.
				for i := range 100 {
					schedule(t, c, fmt.Sprintf("c-%03d", i), "c", at)
				}
				x = schedule(t, c, "x", "c", at)
				for i := range tc.left {
					id, err := h.store.Driver().AttemptStart(context.Background(),
						&driver.AttemptStartParams{Server: "other", Slot: slot, StartedAt: slot, IDs: []int64{x.ID}})
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 {
						ended = id
					}
				}
				clk.Set(at)
				if rec := fire(t, c, at); rec.Outcomes[history.Done] != 101 {
					t.Errorf("slot record %+v, want all 101 done", rec)
				}
				wantOutcome(t, c, "x", history.Done, 1)
			})
		})
	}
}

// An attempt another live server recorded in its present life, younger than
// a group may run, may be a group at work there: it does not end a job
// failed without running (it runs alone instead). Counted toward that, it
// took a group at work for a crash, and with one crash left behind by a
// server gone, ended a job failed that never crashed anything (found by an
// operator's trial: one SIGKILL counted twice). Such an attempt counts in
// full once it is older than a group may run, or when the server has
// restarted since, or is gone.
func TestAttemptsOfALiveServerDoNotCondemn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		live       bool          // "other" heartbeats now
		restarted  bool          // "other" started after recording its attempt
		age        time.Duration // of "other"'s attempt
		wantFailed bool
	}{
		{"live, young", true, false, time.Second, false},
		{"live, older than a group may run", true, false, 2 * time.Hour, true},
		{"live, restarted since", true, true, time.Second, true},
		{"gone", false, false, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forEachStore(t, func(t *testing.T, h *harness) {
				const at = "2026-03-10T10:15:00Z"
				slot := ts(at)
				clk := newClock("2026-03-10T10:00:00Z")
				c := h.client(clk, register(t, "c", func(ctx context.Context, j *checks.Job) (time.Time, error) {
					return time.Time{}, writeAlert(ctx, j)
				}, nil), func(cfg *prescient.Config) { cfg.MaxUnfinished = 2 })
				x := schedule(t, c, "x", "c", at)
				leaveAttempt(t, h, slot, x) // a server gone: one crash
				now := slot.Add(3 * time.Second)
				started := now.Add(-time.Hour)
				if tc.restarted {
					started = now.Add(-tc.age / 2)
				}
				heartbeat := now
				if !tc.live {
					heartbeat = now.Add(-time.Hour)
				}
				if err := h.store.Driver().ServerHeartbeat(context.Background(), &driver.Server{
					Name: "other", StartedAt: started, HeartbeatAt: heartbeat, Timeout: 30 * time.Second}); err != nil {
					t.Fatal(err)
				}
				if _, err := h.store.Driver().AttemptStart(context.Background(),
					&driver.AttemptStartParams{Server: "other", Slot: slot, StartedAt: now.Add(-tc.age), IDs: []int64{x.ID}}); err != nil {
					t.Fatal(err)
				}
				clk.Set(now.Format(time.RFC3339Nano))
				fire(t, c, at)
				if tc.wantFailed {
					wantOutcome(t, c, "x", history.Failed, 0)
				} else {
					wantOutcome(t, c, "x", history.Done, 1)
				}
			})
		})
	}
}
