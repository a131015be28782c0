package cli

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// TestStatusCallsADeadSlotIncomplete: server web-2 started firing slot
// 2026-01-01T10:00:00Z and died in it; its ledger row was never finished.
// Months later `prescient status` listed that slot among the recent ones as
// "running", the state of a firing under way, where the status page says
// "incomplete" (started and not finished: its server died): any unfinished
// row was printed "running", whatever its age or server (found by a
// review). It says incomplete now, as the page does.
func TestStatusCallsADeadSlotIncomplete(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		slot := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
		if err := st.Driver().SlotStart(context.Background(), &driver.SlotRecord{Slot: slot, Server: "web-2",
			Kind: prescient.KindFire, StartedAt: slot.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		out := h.mustRun("status")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "2026-01-01T10:00:00Z") && strings.Contains(l, "web-2") {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("no recent slot row for 2026-01-01T10:00:00Z:\n%s", out)
		}
		if strings.Contains(line, "running") || !strings.Contains(line, "incomplete") {
			t.Errorf("a slot its server started months ago and never finished is shown as running: %q", strings.TrimSpace(line))
		}
	})
}

// TestStatusShowsTheFiringsTime: slot 10:00 fired at its boundary in 1.5s
// and again by a sweep an hour later, finding nothing. `prescient status`
// said "done in 1h0m0s", from the first start to the last finish; it says
// the firings' own time now.
func TestStatusShowsTheFiringsTime(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		slot := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
		rec := func(kind string, start time.Time, took time.Duration) *driver.SlotRecord {
			return &driver.SlotRecord{Slot: slot, Server: "web-1", Kind: kind, StartedAt: start, FinishedAt: start.Add(took), Took: took}
		}
		for _, r := range []*driver.SlotRecord{rec(prescient.KindFire, slot, 1500*time.Millisecond), rec(prescient.KindSweep, slot.Add(time.Hour), 0)} {
			start := *r
			start.FinishedAt, start.Took = time.Time{}, 0
			if err := st.Driver().SlotStart(ctx, &start); err != nil {
				t.Fatal(err)
			}
			if err := st.Driver().SlotFinish(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		out := h.mustRun("status")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "2026-01-01T10:00:00Z") && strings.Contains(l, "web-1") {
				line = l
			}
		}
		if !strings.Contains(line, "done in 1.5s") {
			t.Errorf("slot 10:00, fired in 1.5s and swept an hour later in no time: %q, want done in 1.5s\n%s", strings.TrimSpace(line), out)
		}
	})
}

// TestStatusCallsASlotFiredPastItsEndRunning: web-1, live, is still firing
// the slot before the one in progress (a long slot); `prescient status`
// said "incomplete", the state of a slot whose server died in it.
func TestStatusCallsASlotFiredPastItsEndRunning(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		slot := now.Truncate(15 * time.Minute).Add(-15 * time.Minute)
		// web-1's heartbeat lists the slot among those it fires; its row of
		// the slot before, unfinished and not listed, is incomplete.
		if err := st.Driver().ServerHeartbeat(ctx, &driver.Server{Name: "web-1", StartedAt: slot.Add(-time.Hour), HeartbeatAt: now,
			Firing: []time.Time{slot}}); err != nil {
			t.Fatal(err)
		}
		for _, s := range []time.Time{slot, slot.Add(-15 * time.Minute)} {
			if err := st.Driver().SlotStart(ctx, &driver.SlotRecord{Slot: s, Server: "web-1", Kind: prescient.KindFire, StartedAt: s.Add(time.Second)}); err != nil {
				t.Fatal(err)
			}
		}
		out := h.mustRun("status")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, slot.Format(time.RFC3339)) && strings.Contains(l, "web-1") && strings.Contains(l, "fire") {
				line = l
			}
		}
		if !strings.Contains(line, "running") {
			t.Errorf("a slot its live server is still firing past its end: %q, want running\n%s", strings.TrimSpace(line), out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, slot.Add(-15*time.Minute).Format(time.RFC3339)) && !strings.Contains(l, "incomplete") {
				t.Errorf("the slot before, which web-1 no longer fires: %q, want incomplete", strings.TrimSpace(l))
			}
		}
	})
}

// TestStatusSlotInProgressAndOverdue: the slot in progress, listed first
// among the upcoming ones, read "-4s" (found by a new user's trial); the
// overdue line said "(4s ago)" under "now 10:00:03" for a job due at
// 10:00:00, and told the reader to run `prescient sweep` or start a server,
// which does nothing for jobs of a check no server runs.
func TestStatusSlotInProgressAndOverdue(t *testing.T) {
	at := func(s string, ms int) time.Time {
		return time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Add(mustDuration(t, s) + time.Duration(ms)*time.Millisecond)
	}
	st := &prescient.Status{Now: at("3s", 600), Current: at("3s", 0), Grid: slots.Grid{Resolution: time.Second},
		Jobs: &prescient.JobStats{Pending: 4, Overdue: 1, OldestOverdue: at("0s", 0),
			Upcoming: []prescient.SlotLoad{{Slot: at("3s", 0), Jobs: 2}, {Slot: at("5s", 0), Jobs: 1}}}}
	var b strings.Builder
	writeStatus(&b, st, false)
	out := b.String()
	wantContains(t, "status", out, "oldest due 2026-01-01T10:00:00Z (3s ago)", "jobs of a check no server runs wait for one that does")
	var cur, next string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, "2026-01-01T10:00:03Z"):
			cur = l
		case strings.Contains(l, "2026-01-01T10:00:05Z"):
			next = l
		}
	}
	if !strings.Contains(cur, "in progress") {
		t.Errorf("the slot in progress among the upcoming: %q, want it in progress", cur)
	}
	if !strings.Contains(next, "1s") {
		t.Errorf("the next slot: %q, want in 1s", next)
	}
	if strings.Contains(out, "still being fired") {
		t.Errorf("no slot is fired past its end, yet:\n%s", out)
	}
	// With no sweep scheduled the advice does not promise one (found by an
	// SRE's trial).
	b.Reset()
	incomplete := st.Incomplete
	st.Incomplete = 1
	writeStatus(&b, st, true)
	st.Incomplete = incomplete
	if out := b.String(); !strings.Contains(out, "no sweep is scheduled (sweep.schedule: - in this configuration): `prescient sweep` takes them") ||
		strings.Contains(out, "next sweep") || strings.Contains(out, "catch-up or the sweep takes") ||
		!strings.Contains(out, "1 incomplete: no sweep is scheduled; their owner's catch-up, `prescient sweep` or a server that starts takes their jobs") {
		t.Errorf("status with no sweep scheduled:\n%s", out)
	}

	// The overdue job is in slot 10:00:00, which web-1 still fires past
	// its end: the line said only that the next sweep would take it.
	st.Recent = []*prescient.RecentSlot{{SlotRecord: &driver.SlotRecord{Slot: at("0s", 0), Server: "web-1", Kind: prescient.KindFire,
		StartedAt: at("0s", 10)}, State: prescient.SlotRunning}}
	b.Reset()
	writeStatus(&b, st, false)
	wantContains(t, "status, slot 10:00:00 fired past its end", b.String(),
		"overdue: 1, oldest due 2026-01-01T10:00:00Z (3s ago); slot(s) 2026-01-01T10:00:00Z by web-1 still being fired, past their end, take their own;")
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestStatusCallsASlotAnotherServerFinishedSuperseded: web-2 died in two
// slots; web-1 fired the first of them to the end. `prescient status` said
// "incomplete" for both of web-2's rows, where only the second slot is left
// to catch up (the status page's card and the metrics counted one), and
// `status --json` gave no state at all: scripts had to judge the rows
// themselves. Both now say superseded and incomplete, and count one.
func TestStatusCallsASlotAnotherServerFinishedSuperseded(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		first, second := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 10, 15, 0, 0, time.UTC)
		for _, r := range []*driver.SlotRecord{
			{Slot: first, Server: "web-2", Kind: prescient.KindFire, StartedAt: first},
			{Slot: second, Server: "web-2", Kind: prescient.KindFire, StartedAt: second},
			{Slot: first, Server: "web-1", Kind: prescient.KindCatchup, StartedAt: second},
		} {
			if err := st.Driver().SlotStart(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Driver().SlotFinish(ctx, &driver.SlotRecord{Slot: first, Server: "web-1", Kind: prescient.KindCatchup,
			StartedAt: second, FinishedAt: second.Add(time.Second), Took: time.Second}); err != nil {
			t.Fatal(err)
		}
		out := h.mustRun("status")
		wantContains(t, "status", out, "recent slots (1 incomplete")
		state := func(slot time.Time, server string) string {
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, slot.Format(time.RFC3339)) && strings.Contains(l, server) {
					return l
				}
			}
			return ""
		}
		if l := state(first, "web-2"); !strings.Contains(l, "superseded") {
			t.Errorf("web-2's row of 10:00, which web-1 caught up: %q, want superseded\n%s", strings.TrimSpace(l), out)
		}
		if l := state(second, "web-2"); !strings.Contains(l, "incomplete") {
			t.Errorf("web-2's row of 10:15, which no server finished: %q, want incomplete\n%s", strings.TrimSpace(l), out)
		}

		var js struct {
			Recent []struct {
				Slot   time.Time `json:"slot"`
				Server string    `json:"server"`
				State  string    `json:"state"`
			} `json:"recent_slots"`
			Incomplete *int `json:"incomplete_slots"`
		}
		raw := h.mustRun("status", "--json")
		if err := json.Unmarshal([]byte(raw), &js); err != nil {
			t.Fatalf("status --json: %v\n%s", err, raw)
		}
		got := make(map[string]string)
		for _, r := range js.Recent {
			got[r.Slot.Format("15:04")+" "+r.Server] = r.State
		}
		want := map[string]string{"10:15 web-2": "incomplete", "10:00 web-1": "done", "10:00 web-2": "superseded"}
		if !maps.Equal(got, want) || js.Incomplete == nil || *js.Incomplete != 1 {
			t.Errorf("status --json: recent slots %v and %v incomplete; want %v and 1\n%s", got, js.Incomplete, want, raw)
		}
	})
}

// TestStatusJudgesServersByTheirOwnTimeout: `prescient status` run with a
// configuration other than the servers' (the default server_timeout, 30s)
// called a server gone whose own server_timeout (10m) it had not reached,
// and its slot in progress incomplete. A server's heartbeat records its
// timeout, and readers judge it by that; a server that recorded none (an
// older prescient) by the reader's.
func TestStatusJudgesServersByTheirOwnTimeout(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		current := now.Truncate(15 * time.Minute)
		for _, s := range []*driver.Server{
			{Name: "patient", StartedAt: now.Add(-time.Hour), HeartbeatAt: now.Add(-5 * time.Minute), Timeout: 10 * time.Minute},
			{Name: "older", StartedAt: now.Add(-time.Hour), HeartbeatAt: now.Add(-5 * time.Minute)},
		} {
			if err := st.Driver().ServerHeartbeat(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Driver().SlotStart(ctx, &driver.SlotRecord{Slot: current, Server: "patient", Kind: prescient.KindFire, StartedAt: current}); err != nil {
			t.Fatal(err)
		}
		out := h.mustRun("status")
		server := func(name string) string { // its line in the servers' table
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 1 && f[0] == name {
					return l
				}
			}
			return ""
		}
		if l := server("patient"); !strings.Contains(l, " live ") {
			t.Errorf("a server 5m after its heartbeat, its own timeout 10m: %q, want live\n%s", strings.TrimSpace(l), out)
		}
		if l := server("older"); !strings.Contains(l, " gone ") {
			t.Errorf("a server 5m after its heartbeat, no timeout recorded (the reader's is 30s): %q, want gone\n%s", strings.TrimSpace(l), out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, current.Format(time.RFC3339)) && strings.Contains(l, "patient") && !strings.Contains(l, "running") {
				t.Errorf("the slot in progress, fired by the live server patient: %q, want running", strings.TrimSpace(l))
			}
		}
		// --json says so too, for scripts.
		var js struct {
			Servers []struct {
				Name string `json:"name"`
				Live bool   `json:"live"`
			} `json:"servers"`
		}
		raw := h.mustRun("status", "--json")
		if err := json.Unmarshal([]byte(raw), &js); err != nil {
			t.Fatalf("status --json: %v\n%s", err, raw)
		}
		live := make(map[string]bool)
		for _, s := range js.Servers {
			live[s.Name] = s.Live
		}
		if len(live) != 2 || !live["patient"] || live["older"] {
			t.Errorf("status --json servers live: %v; want patient live, older not\n%s", live, raw)
		}
	})
}

// TestStatusSaysWhoRunsEachCheck: `prescient status` listed pending jobs per
// check without saying that no server ran one of them (found by an
// operator's trial); the servers' heartbeats list the checks they run.
func TestStatusSaysWhoRunsEachCheck(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		now := time.Now()
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
		h.mustRun("schedule", "order", "1", "legacy", "--in", "1h")
		wantContains(t, "status, no server", h.mustRun("status"), "legacy           1  no live server\n")
		for _, s := range []*driver.Server{
			{Name: "web-1", StartedAt: now, HeartbeatAt: now, Checks: []string{"order_unshipped"}},
			{Name: "web-2", StartedAt: now, HeartbeatAt: now, Checks: []string{"order_unshipped", "other"}},
			{Name: "gone", StartedAt: now, HeartbeatAt: now.Add(-time.Hour), Checks: []string{"legacy"}},
		} {
			if err := st.Driver().ServerHeartbeat(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
		out := h.mustRun("status")
		wantContains(t, "status", out, "legacy           1  no live server runs it: its jobs wait",
			"order_unshipped  1  run by web-1, web-2\n")
		// And for scripts (it was in the text alone; found by a new
		// user's trial).
		var js struct {
			RunBy map[string][]string `json:"run_by"`
		}
		if raw := h.mustRun("status", "--json"); json.Unmarshal([]byte(raw), &js) != nil ||
			!reflect.DeepEqual(js.RunBy, map[string][]string{"legacy": {}, "order_unshipped": {"web-1", "web-2"}}) {
			t.Errorf("status --json run_by: %v, want legacy by none, order_unshipped by web-1 and web-2\n%s", js.RunBy, raw)
		}
		// A live server of an older prescient does not say: no run_by.
		if err := st.Driver().ServerHeartbeat(context.Background(), &driver.Server{Name: "old", StartedAt: now, HeartbeatAt: now}); err != nil {
			t.Fatal(err)
		}
		js.RunBy = nil
		if raw := h.mustRun("status", "--json"); json.Unmarshal([]byte(raw), &js) != nil || js.RunBy != nil {
			t.Errorf("status --json beside a server that does not say: run_by %v, want none", js.RunBy)
		}
	})
}

// TestStatusSaysWhoFiresEachUpcomingSlot: `prescient status` listed upcoming
// slots without saying that no live server fires one (a static owner died),
// which the status page said (found by an operator's trial).
func TestStatusSaysWhoFiresEachUpcomingSlot(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		now := time.Now()
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
		wantMatch(t, "status, no server", h.mustRun("status"), `(?m)^  SLOT\s+IN\s+JOBS\s+FIRED BY$`,
			`(?m)^  \S+\s+\S+\s+1\s+no live server \(a sweep takes its jobs once due\)$`)
		every := make([]int, 96) // 15-minute slots over a day: every position
		for i := range every {
			every[i] = i
		}
		for _, s := range []*driver.Server{
			{Name: "web-1", StartedAt: now, HeartbeatAt: now, Positions: every},
			{Name: "gone", StartedAt: now, HeartbeatAt: now.Add(-time.Hour), Positions: every},
		} {
			if err := st.Driver().ServerHeartbeat(context.Background(), s); err != nil {
				t.Fatal(err)
			}
		}
		wantMatch(t, "status", h.mustRun("status"), `(?m)^  \S+\s+\S+\s+1\s+web-1$`)
		var js struct {
			FiredBy [][]string `json:"upcoming_fired_by"`
		}
		if raw := h.mustRun("status", "--json"); json.Unmarshal([]byte(raw), &js) != nil || !reflect.DeepEqual(js.FiredBy, [][]string{{"web-1"}}) {
			t.Errorf("status --json upcoming_fired_by: %v, want [[web-1]]\n%s", js.FiredBy, raw)
		}
	})
}
