package prescient_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// NewClient refuses automatic ownership on a store for one host: it exists
// to spread slots over servers on several hosts.
func TestAutoOwnershipRefusedOnSQLite(t *testing.T) {
	t.Parallel()
	h := openSQLite(t)
	_, err := prescient.NewClient(h.store, &prescient.Config{Server: "a", AutoOwnership: true})
	if err == nil || !strings.Contains(err.Error(), "automatic ownership") {
		t.Fatalf("new client with automatic ownership on SQLite: %v, want a refusal naming it", err)
	}
}

// TestAutoOwnershipSpreadsAndTakesOver runs on PostgreSQL only: SQLite
// refuses automatic ownership (TestAutoOwnershipRefusedOnSQLite).
func TestAutoOwnershipSpreadsAndTakesOver(t *testing.T) {
	t.Parallel()
	func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		rec := &calls{}
		reg := register(t, "unshipped", alertOnce(rec), nil)
		minutes := slots.Grid{Resolution: time.Minute, Cycle: 6 * time.Minute}
		servers := map[string]*prescient.Client{}
		for _, name := range []string{"a", "b", "c"} {
			servers[name] = h.client(clk, reg, func(c *prescient.Config) {
				c.Server, c.Grid, c.AutoOwnership = name, minutes, true
				c.Heartbeat, c.ServerTimeout = time.Minute, 3*time.Minute
			})
		}
		beat := func(names ...string) {
			for _, n := range names {
				if err := servers[n].Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Two rounds: the first servers to beat have not yet seen the later ones.
		beat("a", "b", "c")
		beat("a", "b", "c")
		var all []int
		for _, n := range []string{"a", "b", "c"} {
			ps := servers[n].Positions()
			if len(ps) != 2 {
				t.Fatalf("server %s owns %v, want 2 of 6 positions", n, ps)
			}
			all = append(all, ps...)
		}
		if slices.Sort(all); !slices.Equal(all, []int{0, 1, 2, 3, 4, 5}) {
			t.Fatalf("positions owned: %v, want each of 0..5 once", all)
		}
		st, err := servers["a"].Status(ctx, nil)
		if err != nil || len(st.Servers) != 3 {
			t.Fatalf("status lists %d servers, %v; want 3", len(st.Servers), err)
		}

		const jobs = 30 // one a minute from 10:01 to 10:30
		for i := range jobs {
			schedule(t, servers["a"], fmt.Sprint(i), "unshipped", clk.Now().Add(time.Duration(i+1)*time.Minute).Format(time.RFC3339))
		}
		// c runs for three minutes and dies before its 10:04 slot; a and b
		// carry on, notice after the timeout, take c's positions and catch up
		// the slots c left.
		for m := 1; m <= jobs+1; m++ {
			clk.Add(time.Minute)
			live := []string{"a", "b"}
			if m <= 3 {
				live = append(live, "c")
			}
			beat(live...)
			for _, n := range live {
				servers[n].Tick(ctx)
			}
		}
		if got := servers["a"].Positions(); len(got) != 3 {
			t.Fatalf("after c died a owns %v, want 3 positions", got)
		}
		recs, err := servers["a"].History(ctx, history.Filter{Check: "unshipped", Limit: 100})
		if err != nil || len(recs) != jobs {
			t.Fatalf("history has %d records, %v; want %d", len(recs), err, jobs)
		}
		var worst time.Duration
		for _, r := range recs {
			if r.Outcome != history.Done || r.CheckCount != 1 {
				t.Errorf("job %s: %s after %d checks", r.Key, r.Outcome, r.CheckCount)
			}
			worst = max(worst, r.Lateness)
		}
		if rec.total() != jobs {
			t.Fatalf("%d check calls for %d jobs", rec.total(), jobs)
		}
		// c's missed slots were caught up late, but within the timeout plus a slot.
		if limit := 3*time.Minute + time.Minute; worst <= 0 || worst > limit {
			t.Errorf("worst lateness %s, want a catch-up within %s", worst, limit)
		}
		t.Logf("takeover: %d jobs, 0 duplicates, 0 lost, worst lateness %s", jobs, worst)
	}(t, openPostgres(t))
}

// Servers of static ownership beside servers of automatic ownership (an
// operator moving servers from one to the other, one at a time): the
// automatic ones share the positions the live static ones do not fire, so
// that every position is fired by someone. Counted among them, a static
// server was given positions it never fired, and one of its own went
// unfired until the sweep (found by an operator's trial). A server whose
// heartbeat says nothing of its ownership (an older prescient's) counts as
// automatic, as before; so does a static server once it is gone.
func TestAutoOwnershipBesideStaticServers(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	quarters := slots.Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}
	static := h.client(clk, &checks.Registry{}, func(c *prescient.Config) {
		c.Server, c.Grid = "web-1", quarters
		c.Ownership = slots.Ownership{"web-1": {0, 2}, "web-2": {1, 3}}
	})
	auto := map[string]*prescient.Client{}
	for _, name := range []string{"a-1", "a-2"} {
		auto[name] = h.client(clk, &checks.Registry{}, func(c *prescient.Config) {
			c.Server, c.Grid, c.AutoOwnership = name, quarters, true
			c.Heartbeat, c.ServerTimeout = time.Minute, 3*time.Minute
		})
	}
	beatAll := func(cs ...*prescient.Client) {
		for range 2 { // the first to beat have not yet seen the others
			for _, c := range cs {
				if err := c.Heartbeat(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	owned := func(cs ...*prescient.Client) []int {
		var all []int
		for _, c := range cs {
			all = append(all, c.Positions()...)
		}
		slices.Sort(all)
		return all
	}

	beatAll(static, auto["a-1"], auto["a-2"])
	if got := owned(auto["a-1"], auto["a-2"]); !slices.Equal(got, []int{1, 3}) {
		t.Errorf("beside web-1 (static: 0, 2), the automatic servers own %v, want [1 3], once each", got)
	}
	if got := owned(static, auto["a-1"], auto["a-2"]); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("every server together owns %v, want each position once", got)
	}

	// web-1 gone: the automatic servers take every position.
	clk.Add(10 * time.Minute)
	beatAll(auto["a-1"], auto["a-2"])
	if got := owned(auto["a-1"], auto["a-2"]); !slices.Equal(got, []int{0, 1, 2, 3}) {
		t.Errorf("with web-1 gone, the automatic servers own %v, want each position once", got)
	}

	// A server of every position (no static map) leaves them none.
	every := h.client(clk, &checks.Registry{}, func(c *prescient.Config) { c.Server, c.Grid = "all", quarters })
	beatAll(every, auto["a-1"], auto["a-2"])
	if got := owned(auto["a-1"], auto["a-2"]); len(got) != 0 {
		t.Errorf("beside a server of every position, the automatic servers own %v, want none", got)
	}
	clk.Add(10 * time.Minute) // it goes

	// A server that says nothing of its ownership counts as automatic.
	if err := h.store.Driver().ServerHeartbeat(ctx, &driver.Server{Name: "old", StartedAt: clk.Now(), HeartbeatAt: clk.Now(),
		Positions: []int{0, 1, 2, 3}, Timeout: 3 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	beatAll(auto["a-1"], auto["a-2"])
	if n := len(owned(auto["a-1"], auto["a-2"])); n == 4 || n == 0 {
		t.Errorf("beside a server of an older prescient, the automatic servers own %d positions, want them shared with it", n)
	}
}
