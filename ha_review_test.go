package prescient_test

// Multi-server paths (ownership, hand-over, ledger) found wanting by a
// review: each test here failed before its fix; the comment on each says
// what went wrong.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// A standby server (automatic ownership, no position of its own: more
// servers than positions, or a one-position cycle) that takes over a dead
// server's positions must sweep the jobs that server left behind, as a server
// that already had positions does ("A server that stops heartbeating ...
// loses its positions to the others, which catch up the slots it left
// incomplete in the ledger and sweep the jobs it left behind"). Heartbeat
// only swept when the positions it had before were non-nil, and a server
// with no position has nil: the standby never swept on takeover, and jobs
// in slots older than the catch-up look-back (server_timeout + one slot
// before the first tick after the takeover: any slot the dead server
// missed between its last heartbeat and takeover-timeout, which happens as
// soon as the heartbeat is longer than the resolution, e.g. a 1s grid with
// the default 5s heartbeat) wait for the scheduled sweep, or for ever with
// sweep.schedule "-".
func TestHAStandbyTakingOverSweeps(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	rec := &calls{}
	reg := register(t, "unshipped", alertOnce(rec), nil)
	oneSlot := slots.Grid{Resolution: time.Minute, Cycle: time.Minute} // one position
	servers := map[string]*prescient.Client{}
	for _, name := range []string{"a", "b"} {
		servers[name] = h.client(clk, reg, func(c *prescient.Config) {
			c.Server, c.Grid, c.AutoOwnership = name, oneSlot, true
			// Scaled up from a 1s grid with a 5s heartbeat: the heartbeat
			// is longer than a slot.
			c.Heartbeat, c.ServerTimeout = time.Hour, 3*time.Hour
		})
	}
	for range 2 {
		for _, n := range []string{"a", "b"} {
			if err := servers[n].Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	owner, standby := servers["a"], servers["b"]
	if len(owner.Positions()) == 0 {
		owner, standby = standby, owner
	}
	if len(owner.Positions()) != 1 || len(standby.Positions()) != 0 {
		t.Fatalf("positions %v and %v, want one owner and one standby", owner.Positions(), standby.Positions())
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer standby.Stop(ctx)

	// The owner dies right after its 10:00 heartbeat; a job was due at 10:05.
	schedule(t, standby, "x", "unshipped", "2026-03-10T10:05:00Z")
	clk.Set("2026-03-10T13:00:00Z") // the owner's heartbeat is exactly server_timeout old: still live
	if err := standby.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	standby.Tick(ctx)
	clk.Set("2026-03-10T14:00:00Z") // the next heartbeat: the owner is gone
	if err := standby.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if got := standby.Positions(); !slices.Equal(got, []int{0}) {
		t.Fatalf("the standby owns %v after the owner died, want [0]", got)
	}
	standby.Tick(ctx)

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(historyOf(t, standby, "x")) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	if len(historyOf(t, standby, "x")) == 0 {
		j := wantPending(t, standby, "x", "unshipped")
		t.Fatalf("job x, due at %s in a slot the dead server left, is still pending after the standby took its position over "+
			"(no takeover sweep; %d check calls)", j.NextCheckAt.Format(time.RFC3339), rec.total())
	}
	wantOutcome(t, standby, "x", history.Done, 1)
}

// The slot ledger keeps one row per slot and server "adding up every firing
// of the slot by that server". Each firing read the row when it started and
// wrote its own total at the end, so two firings of one slot under one
// server name in two processes (the running server and `prescient sweep`,
// which takes the configuration's server name, as the README invites for a
// slot still in progress) overwrote each other's counts: the last to finish
// won, and the ledger (status, `prescient slots`, lag per slot) under-counted
// the jobs the slot checked. Now each firing adds its own.
func TestHASameServerNameFiringsKeepLedgerCounts(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	const at = "2026-03-10T10:15:00Z"
	const n = 20
	rec := &calls{}
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Now.Equal(ts(at)) { // the running server's firing, on its clock
			once.Do(func() {
				close(blocked)
				<-release
			})
		}
		return alertOnce(rec)(ctx, j)
	}
	reg := register(t, "unshipped", check, nil)
	srvClk, cliClk := newClock("2026-03-10T10:00:00Z"), newClock("2026-03-10T10:31:00Z")
	server := h.client(srvClk, reg, func(c *prescient.Config) { c.Server, c.Workers, c.GroupSize = "web-1", 1, 1 })
	cli := h.client(cliClk, reg, func(c *prescient.Config) { c.Server = "web-1" }) // `prescient sweep` on the same host
	for i := range n {
		schedule(t, server, fmt.Sprint(i), "unshipped", at)
	}
	srvClk.Set(at)
	fired := make(chan error, 1)
	go func() {
		_, err := server.FireSlot(ctx, ts(at))
		fired <- err
	}()
	select { // the server's firing is under way, its first check running
	case <-blocked:
	case err := <-fired:
		t.Fatalf("the server's firing ended before its first check: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server's first check never ran")
	}
	res, err := cli.Sweep(ctx, prescient.SweepRun)
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-fired; err != nil {
		t.Fatal(err)
	}
	if got := h.count("SELECT DISTINCT entity_key FROM alerts"); got != n || rec.total() != n {
		t.Fatalf("%d orders alerted by %d check calls, want %d each", got, rec.total(), n)
	}
	recs, err := server.Slots(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Slot.Equal(ts(at)) && r.Server == "web-1" {
			if !r.Complete() || r.Checked != n {
				t.Fatalf("ledger row of %s by web-1: checked %d (complete %v), want %d: the sweep checked %d, "+
					"the server the rest, and the last to finish overwrote the other's count", at, r.Checked, r.Complete(), n, res.Jobs)
			}
			return
		}
	}
	t.Fatalf("no ledger row for %s by web-1: %+v", at, recs)
}

// With automatic ownership each server decided who is live by comparing the
// heartbeats the others wrote with their own clocks against its own clock.
// The README said skew beyond server_timeout - 2*heartbeat makes a live
// server "taken for dead and its positions fired twice over (safe, but
// wasted work)". It could also leave a position fired by nobody, for as long
// as the skew lasted: here c's clock is 40s ahead of b's (a is in between,
// 20s from each), so c takes b for dead and spreads the positions over {a,
// c}, while a and b spread them over {a, b, c}; position 2 is c's in a's and
// b's view and a's in c's view, and no server ever fired it. Now a server
// judges another by whether its heartbeat moves, on its own clock. Its jobs wait
// for the scheduled sweep (or for ever with sweep.schedule "-").
func TestHAClockSkewLeavesNoPositionUnowned(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	base := newClock("2026-03-10T10:00:00Z")
	skew := map[string]time.Duration{"b": 0, "a": 20 * time.Second, "c": 40 * time.Second}
	rec := &calls{}
	reg := register(t, "unshipped", alertOnce(rec), nil)
	grid := slots.Grid{Resolution: time.Minute, Cycle: 3 * time.Minute}
	names := []string{"a", "b", "c"}
	servers := map[string]*prescient.Client{}
	for _, name := range names {
		now := func() time.Time { return base.Now().Add(skew[name]) }
		servers[name] = h.client(base, reg, func(c *prescient.Config) {
			c.Server, c.Grid, c.AutoOwnership, c.Now = name, grid, true, now
			c.Heartbeat, c.ServerTimeout = 5*time.Second, 30*time.Second // the defaults
		})
	}
	beat := func() {
		for _, n := range names {
			if err := servers[n].Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat()
	beat()
	owned := map[int][]string{}
	for _, n := range names {
		for _, p := range servers[n].Positions() {
			owned[p] = append(owned[p], n)
		}
	}
	// One job per slot over two cycles, then every server heartbeats and
	// ticks at each slot as the engine would.
	for i := range 6 {
		schedule(t, servers["b"], fmt.Sprint(i), "unshipped", base.Now().Add(time.Duration(i+1)*time.Minute).Format(time.RFC3339))
	}
	for range 7 {
		for range 12 { // a heartbeat every 5s
			base.Add(5 * time.Second)
			beat()
		}
		for _, n := range names {
			servers[n].Tick(ctx)
		}
		for _, n := range names {
			for _, p := range servers[n].Positions() {
				if !slices.Contains(owned[p], n) {
					owned[p] = append(owned[p], n)
				}
			}
		}
	}
	var unowned []int
	for p := range grid.Positions() {
		if len(owned[p]) == 0 {
			unowned = append(unowned, p)
		}
	}
	pending, err := servers["b"].Jobs(ctx, prescient.JobsParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(unowned) > 0 || len(pending) > 0 {
		var keys []string
		for _, j := range pending {
			keys = append(keys, fmt.Sprintf("%s@%s(position %d)", j.Key, j.NextCheckAt.Format("15:04"), grid.Position(j.NextCheckAt)))
		}
		t.Fatalf("owners per position %v: positions %v owned by no server; jobs never fired: %v (%d of 6 checked)",
			owned, unowned, keys, rec.total())
	}
}

// A server that starts shortly after another died, and sees the dead
// server's row for the first time, took its last heartbeat as "moving now"
// (at = its own now), so it held the dead server for live up to
// server_timeout longer than the servers that saw it stop. Meanwhile the
// servers disagree on who is live, and positions fall to nobody: the old
// servers hand them to the new one, the new one leaves them to the dead
// one. All clocks here agree: the comparison of clocks the change removed
// would have had every server drop the dead one at the same time.
func TestHAFirstSightingKeepsNoDeadServerLive(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	rec := &calls{}
	reg := register(t, "unshipped", alertOnce(rec), nil)
	grid := slots.Grid{Resolution: time.Minute, Cycle: time.Hour} // 60 positions
	servers := map[string]*prescient.Client{}
	for _, name := range []string{"a", "b", "c", "d"} {
		servers[name] = h.client(clk, reg, func(c *prescient.Config) {
			c.Server, c.Grid, c.AutoOwnership = name, grid, true
			c.Heartbeat, c.ServerTimeout = 5*time.Second, 30*time.Second // the defaults
		})
	}
	beat := func(names ...string) {
		for _, n := range names {
			if err := servers[n].Heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a, b and c run for a while; then c dies (its row stays).
	for range 4 {
		clk.Add(5 * time.Second)
		beat("a", "b", "c")
	}
	died := clk.Now()
	alive := []string{"a", "b"}
	for i := 1; i <= 20; i++ { // 100 s, a heartbeat every 5 s
		clk.Add(5 * time.Second)
		if clk.Now().Sub(died) == 25*time.Second {
			alive = append(alive, "d") // d starts: its first heartbeat
		}
		beat(alive...)
		if clk.Now().Sub(died) < 40*time.Second {
			// c is live for a and b until 30 s after they noticed its
			// last heartbeat (at most one heartbeat late): its positions
			// wait meanwhile, by design.
			continue
		}
		var unowned []int
		for p := range grid.Positions() {
			owned := false
			for _, n := range alive {
				owned = owned || slices.Contains(servers[n].Positions(), p)
			}
			if !owned {
				unowned = append(unowned, p)
			}
		}
		if len(unowned) > 0 {
			t.Errorf("%s after c's last heartbeat (live servers %v, all clocks equal; a and b took c for dead): positions %v are fired by no live server, "+
				"d still holding c for live since it first saw c's row 25 s after its last heartbeat (a owns %d, b %d, d %d positions)", clk.Now().Sub(died), alive, unowned,
				len(servers["a"].Positions()), len(servers["b"].Positions()), len(servers["d"].Positions()))
		}
	}
}
