package prescient_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// TestSQLitePruneLetsTheSlotsFire: on SQLite, with its one writer, a prune
// of a long backlog deleted in batches, each a write of the server's own,
// which go before its processing transactions: a slot fired during the
// prune waited for the whole of it (5.7 s for a million records, a slot of
// 5 s missed; found by a trial of history at scale). The prune now pauses
// after each batch, so a slot fired meanwhile finishes while the prune
// still has records to delete.
func TestSQLitePruneLetsTheSlotsFire(t *testing.T) {
	t.Parallel()
	h := openSQLite(t)
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "c", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil), func(c *prescient.Config) { c.HistoryRetention = 24 * time.Hour })
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
	}
	oldHistory(h, 20000) // finished a year ago
	clk.Set("2026-03-10T10:15:00Z")

	pruned := make(chan error, 1)
	go func() {
		_, err := c.Prune(context.Background())
		pruned <- err
	}()
	for h.count("SELECT id FROM prescient_history WHERE finished_by = 's0'") == 20000 {
		time.Sleep(time.Millisecond) // until the prune has begun deleting
	}
	fire(t, c, "2026-03-10T10:15:00Z")
	left := h.count("SELECT id FROM prescient_history WHERE finished_by = 's0'")
	if err := <-pruned; err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Errorf("the slot fired during the prune finished only once the prune had deleted every record: it waited for all of it")
	}
	if n := h.count("SELECT id FROM prescient_history WHERE finished_by = 's0'"); n != 0 {
		t.Errorf("%d old records left after the prune", n)
	}
	if n := h.count("SELECT id FROM prescient_history WHERE entity_key IN ('a', 'b', 'c', 'd', 'e') AND outcome = 'done'"); n != 5 {
		t.Errorf("%d of the slot's 5 jobs done", n)
	}
}

// TestPruneStoppedByShutdownIsNotAnError: a server stopped while its
// scheduled prune runs logged the prune at ERROR ("context canceled"),
// paging whoever alerts on errors at every deploy that met one (found by a
// trial of history at scale); it says, at INFO, that the next prune deletes
// the rest.
func TestPruneStoppedByShutdownIsNotAnError(t *testing.T) {
	t.Parallel()
	h := openSQLite(t)
	clk := newClock("2026-03-10T10:00:00Z")
	logs := &lockedBuffer{}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	c := h.client(clk, register(t, "c", noop, nil), func(c *prescient.Config) {
		c.HistoryRetention = 24 * time.Hour
		c.PruneSchedule = "@every 1s"
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	oldHistory(h, 20000) // finished a year ago
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for h.count("SELECT id FROM prescient_history WHERE finished_by = 's0'") == 20000 {
		time.Sleep(time.Millisecond) // until the prune has begun deleting
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h.count("SELECT id FROM prescient_history WHERE finished_by = 's0'") == 0 {
		t.Fatal("the prune finished before the server stopped: nothing was cut short")
	}
	var stopped bool
	for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if rec.Level == "ERROR" {
			t.Errorf("logged at ERROR: %s", l)
		}
		stopped = stopped || (rec.Level == "INFO" && strings.HasPrefix(rec.Msg, "prune stopped by shutdown"))
	}
	if !stopped {
		t.Errorf("no INFO line saying the prune was stopped by shutdown; log:\n%s", logs.String())
	}
}

// oldHistory inserts n records of jobs finished a year before the tests'
// clock, by server s0, on SQLite.
func oldHistory(h *harness, n int) {
	old := ts("2025-03-10T10:00:00Z").UnixMicro()
	h.exec(`WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < $2)
		INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at, check_count,
			failure_count, runtime_us, lateness_us, created_at, finished_at, finished_by)
		SELECT 1000000 + i, 'order', 'old' || i, 'c', 'done', $1, 1, 0, 0, 0, $1, $1 + i, 's0' FROM g`, old, n)
}
