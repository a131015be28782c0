package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// historyFixture fills history with six records and returns their ids by
// name: r1 order/1 a cancelled at 1h; r2 order/2 a resolved at 2h; r3
// order/1 b done at 3h; r4 user/1 a failed at 4h; r5 order/1 c guard_past
// at 5h; r6 order/3 a cancelled at 5h (after base).
func historyFixture(t *testing.T, h *Harness) map[string]int64 {
	t.Helper()
	ids := make(map[string]int64)
	ids["r1"] = schedule(t, h, "order", "1", "a", slot(1), "").ID
	if _, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{Entity: "order", Key: "1", Check: "a", Now: at(time.Hour), By: "api"}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if err := h.Store.CatalogSave(t.Context(), []driver.CatalogEntry{{Check: "a", Awaits: []string{"shipped"}}}); err != nil {
		t.Fatalf("save catalog: %v", err)
	}
	ids["r2"] = schedule(t, h, "order", "2", "a", slot(1), "").ID
	if _, err := h.Store.JobResolve(t.Context(), nil, &driver.JobResolveParams{Entity: "order", Key: "2", Event: "shipped", Now: at(2 * time.Hour), By: "api"}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	finish := func(name, entity, key, check string, o history.Outcome, now time.Time) {
		id := schedule(t, h, entity, key, check, slot(1), "").ID
		ids[name] = id
		process(t, h, []int64{id}, slot(1), now, "srv-1", func(*checks.Job) driver.Decision {
			return driver.Decision{Outcome: o, Checked: true}
		})
	}
	finish("r3", "order", "1", "b", history.Done, at(3*time.Hour))
	finish("r4", "user", "1", "a", history.Failed, at(4*time.Hour))
	finish("r5", "order", "1", "c", history.GuardPast, at(5*time.Hour))
	ids["r6"] = schedule(t, h, "order", "3", "a", slot(1), "").ID
	if _, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{Entity: "order", Key: "3", Now: at(5 * time.Hour), By: "api"}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	return ids
}

func testHistoryFilters(t *testing.T, h *Harness) {
	ids := historyFixture(t, h)
	cases := []struct {
		name   string
		filter history.Filter
		want   []string
	}{
		{"all, newest first, ties by id", history.Filter{}, []string{"r6", "r5", "r4", "r3", "r2", "r1"}},
		{"entity", history.Filter{Entity: "order"}, []string{"r6", "r5", "r3", "r2", "r1"}},
		{"entity and key", history.Filter{Entity: "order", Key: "1"}, []string{"r5", "r3", "r1"}},
		{"check", history.Filter{Check: "a"}, []string{"r6", "r4", "r2", "r1"}},
		{"outcomes", history.Filter{Outcomes: []history.Outcome{history.Done, history.Failed}}, []string{"r4", "r3"}},
		{"since and until", history.Filter{Since: at(2 * time.Hour), Until: at(4 * time.Hour)}, []string{"r3", "r2"}},
		{"limit", history.Filter{Limit: 2}, []string{"r6", "r5"}},
		{"entity and outcome", history.Filter{Entity: "order", Outcomes: []history.Outcome{history.Cancelled}}, []string{"r6", "r1"}},
		{"nothing matches", history.Filter{Entity: "order", Check: "zzz"}, nil},
	}
	for _, c := range cases {
		recs, err := h.Store.HistoryList(t.Context(), c.filter)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var got, want []int64
		for _, r := range recs {
			got = append(got, r.ID)
		}
		for _, n := range c.want {
			want = append(want, ids[n])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: ids %v, want %v (%v)", c.name, got, want, c.want)
		}
	}
	if _, err := h.Store.HistoryList(t.Context(), history.Filter{Key: "1"}); err == nil {
		t.Errorf("filter with a key and no entity: no error")
	}
}

func testHistoryCountsAndPrune(t *testing.T, h *Harness) {
	ids := historyFixture(t, h)
	counts, err := h.Store.HistoryCounts(t.Context(), at(2*time.Hour))
	if err != nil {
		t.Fatalf("counts: %v", err)
	}
	want := map[history.Outcome]int{history.Resolved: 1, history.Done: 1, history.Failed: 1, history.GuardPast: 1, history.Cancelled: 1}
	var d diff
	d.val("counts since 2h", counts, want)
	counts, err = h.Store.HistoryCounts(t.Context(), time.Time{})
	if err != nil {
		t.Fatalf("counts: %v", err)
	}
	want[history.Cancelled] = 2
	d.val("counts of all", counts, want)
	d.check(t, "history counts")

	prune := at(3 * time.Hour)
	for _, n := range []int{11, 12, 13} {
		if err := h.Store.SlotStart(t.Context(), &driver.SlotRecord{Slot: slot(n), Server: "srv-1", Kind: "fire", StartedAt: slot(n)}); err != nil {
			t.Fatalf("start slot: %v", err)
		}
	}
	// A server gone since before the prune is forgotten; one that
	// heartbeated since stays.
	for _, srv := range []*driver.Server{
		{Name: "gone", StartedAt: at(0), HeartbeatAt: at(time.Hour)},
		{Name: "live", StartedAt: at(0), HeartbeatAt: at(4 * time.Hour)},
	} {
		if err := h.Store.ServerHeartbeat(t.Context(), srv); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	if h.SetPruneBatch != nil {
		h.SetPruneBatch(1) // the two records go in two batches
	}
	n, err := h.Store.HistoryPrune(t.Context(), prune)
	if err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want 2, nil", n, err)
	}
	if srvs, err := h.Store.ServerList(t.Context()); err != nil || len(srvs) != 1 || srvs[0].Name != "live" {
		t.Errorf("servers after prune before %v: %v, %v; want live alone", prune, srvs, err)
	}
	recs, err := h.Store.HistoryList(t.Context(), history.Filter{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var got []int64
	for _, r := range recs {
		got = append(got, r.ID)
	}
	if wantIDs := []int64{ids["r6"], ids["r5"], ids["r4"], ids["r3"]}; !slices.Equal(got, wantIDs) {
		t.Errorf("history after prune: %v, want %v", got, wantIDs)
	}
	slots := slotList(t, h, &driver.SlotListParams{})
	if len(slots) != 2 || !slots[0].Slot.Equal(slot(13)) || !slots[1].Slot.Equal(slot(12)) {
		t.Errorf("ledger after prune before %v: %d rows, want slots %v and %v", prune, len(slots), slot(13), slot(12))
	}
	if n, err := h.Store.HistoryPrune(t.Context(), prune); err != nil || n != 0 {
		t.Errorf("prune again: %d, %v; want 0, nil", n, err)
	}
}

func testServers(t *testing.T, h *Harness) {
	list := func() []*driver.Server {
		t.Helper()
		srvs, err := h.Store.ServerList(t.Context())
		if err != nil {
			t.Fatalf("list servers: %v", err)
		}
		return srvs
	}
	if srvs := list(); len(srvs) != 0 {
		t.Fatalf("servers of an empty store: %d, want 0", len(srvs))
	}
	b := &driver.Server{Name: "srv-b", StartedAt: at(time.Minute), HeartbeatAt: at(2 * time.Minute), Positions: []int{1, 3}}
	a := &driver.Server{Name: "srv-a", StartedAt: at(time.Minute), HeartbeatAt: at(2 * time.Minute)}
	for _, s := range []*driver.Server{b, a} {
		if err := h.Store.ServerHeartbeat(t.Context(), s); err != nil {
			t.Fatalf("heartbeat %s: %v", s.Name, err)
		}
	}
	// srv-a fires two slots at its next heartbeat, then none at the one
	// after: the list is the latest heartbeat's.
	a2 := &driver.Server{Name: "srv-a", StartedAt: at(time.Minute), HeartbeatAt: at(3 * time.Minute), Positions: []int{0, 2},
		Firing: []time.Time{slot(1), slot(2)}, Timeout: 90 * time.Second, Checks: []string{"a", "b"}}
	if err := h.Store.ServerHeartbeat(t.Context(), a2); err != nil {
		t.Fatalf("heartbeat again: %v", err)
	}
	serverDiffs(t, list(), []*driver.Server{a2, b})
	// An older prescient's heartbeat (after a rollback) moves heartbeat_at
	// (here to another time the row holds) and leaves the slots fired, the
	// timeout and the checks as they were: written with another heartbeat,
	// they are stale.
	if err := h.Exec(t.Context(), `UPDATE prescient_servers SET heartbeat_at = started_at WHERE name = 'srv-a'`); err != nil {
		t.Fatalf("heartbeat as an older prescient: %v", err)
	}
	older := *a2
	older.HeartbeatAt, older.Firing, older.Timeout, older.Checks = a2.StartedAt, nil, 0, nil
	serverDiffs(t, list(), []*driver.Server{&older, b})
	// The prescient of migration 00015 writes firing_at with its heartbeat
	// (and its slots fired and timeout, here as they were), not its checks.
	if err := h.Exec(t.Context(), `UPDATE prescient_servers SET firing_at = started_at WHERE name = 'srv-a'`); err != nil {
		t.Fatalf("heartbeat as the prescient of 00015: %v", err)
	}
	older.Firing, older.Timeout = a2.Firing, a2.Timeout
	serverDiffs(t, list(), []*driver.Server{&older, b})
	if err := h.Store.ServerHeartbeat(t.Context(), a2); err != nil {
		t.Fatalf("heartbeat again: %v", err)
	}
	serverDiffs(t, list(), []*driver.Server{a2, b})
	a2.Firing, a2.HeartbeatAt = nil, at(4*time.Minute)
	if err := h.Store.ServerHeartbeat(t.Context(), a2); err != nil {
		t.Fatalf("heartbeat again: %v", err)
	}
	serverDiffs(t, list(), []*driver.Server{a2, b})
	// A process of the name srv-b that started earlier, stopping late,
	// leaves the registration of the one that replaced it.
	if err := h.Store.ServerDelete(t.Context(), "srv-b", at(0)); err != nil {
		t.Fatalf("delete an earlier process's registration: %v", err)
	}
	serverDiffs(t, list(), []*driver.Server{a2, b})
	if err := h.Store.ServerDelete(t.Context(), "srv-b", b.StartedAt); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := h.Store.ServerDelete(t.Context(), "srv-missing", at(0)); err != nil {
		t.Errorf("delete a missing server: %v", err)
	}
	serverDiffs(t, list(), []*driver.Server{a2})
}

func serverDiffs(t *testing.T, got, want []*driver.Server) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("servers: %d, want %d", len(got), len(want))
	}
	for i := range got {
		var d diff
		d.val("Name", got[i].Name, want[i].Name)
		d.time("StartedAt", got[i].StartedAt, want[i].StartedAt)
		d.time("HeartbeatAt", got[i].HeartbeatAt, want[i].HeartbeatAt)
		if len(got[i].Positions) != 0 || len(want[i].Positions) != 0 {
			d.val("Positions", got[i].Positions, want[i].Positions)
		}
		if got[i].Firing == nil {
			d.val("Firing", "nil", "not nil")
		}
		d.val("Firing (slots)", len(got[i].Firing), len(want[i].Firing))
		d.val("Timeout", got[i].Timeout, want[i].Timeout)
		d.val("Checks", got[i].Checks, want[i].Checks)
		for j := range min(len(got[i].Firing), len(want[i].Firing)) {
			d.time(fmt.Sprintf("Firing[%d]", j), got[i].Firing[j], want[i].Firing[j])
		}
		d.check(t, "server "+want[i].Name)
	}
}

// testHistoryLatest: a job's latest end is its record with the highest id,
// whatever the finish times say (each is its writer's clock).
func testHistoryLatest(t *testing.T, h *Harness) {
	first := schedule(t, h, "order", "7", "a", slot(1), "").ID
	if _, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{Entity: "order", Key: "7", Check: "a", Now: at(2 * time.Hour), By: "api"}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	// Scheduled anew and ended by a host whose clock runs an hour behind.
	second := schedule(t, h, "order", "7", "a", slot(1), "").ID
	if _, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{Entity: "order", Key: "7", Check: "a", Now: at(time.Hour), By: "api"}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if second <= first {
		t.Fatalf("setup: the job scheduled anew got id %d, not above %d", second, first)
	}
	r, err := h.Store.HistoryLatest(t.Context(), "order", "7", "a")
	if err != nil || r.ID != second || !r.FinishedAt.Equal(at(time.Hour)) {
		t.Fatalf("latest of order/7/a: %+v, %v; want record %d, finished at %s", r, err, second, at(time.Hour))
	}
	if _, err := h.Store.HistoryLatest(t.Context(), "order", "7", "b"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("latest of a job with no history: %v, want ErrNotFound", err)
	}
}

// testHistoryNoPayload: a listing with NoPayload returns the records whole
// but for their payloads, which it does not read.
func testHistoryNoPayload(t *testing.T, h *Harness) {
	schedule(t, h, "order", "1", "a", slot(1), `{"note": "kept"}`)
	if _, err := h.Store.JobCancel(t.Context(), nil, &driver.JobCancelParams{Entity: "order", Key: "1", Check: "a", Now: at(time.Hour), By: "api"}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	whole, err := h.Store.HistoryList(t.Context(), history.Filter{})
	if err != nil || len(whole) != 1 || len(whole[0].Payload) == 0 {
		t.Fatalf("history: %v, %v: want the record with its payload", whole, err)
	}
	bare, err := h.Store.HistoryList(t.Context(), history.Filter{NoPayload: true})
	if err != nil || len(bare) != 1 {
		t.Fatalf("history without payloads: %v, %v", bare, err)
	}
	if bare[0].Payload != nil {
		t.Errorf("history without payloads: payload %s, want none", bare[0].Payload)
	}
	w, b := *whole[0], *bare[0]
	w.Payload, b.Payload = nil, nil
	if fmt.Sprintf("%+v", w) != fmt.Sprintf("%+v", b) {
		t.Errorf("history without payloads:\n %+v\nwant the record as listed whole but for its payload:\n %+v", b, w)
	}
}
