package cli

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// A check taken out of every server left its jobs pending forever, listed
// as unknown, with no command to clear them but one `cancel` per entity
// key. `prescient checks retire` cancels them all (history: cancelled, by
// retire) and drops the check from the catalog; it refuses a check this
// binary runs, and says so when there is nothing to retire.
func TestChecksRetire(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		ctx := context.Background()
		for _, key := range []string{"1", "2", "3"} {
			h.mustRun("schedule", "order", key, "legacy", "--in", "1h")
		}
		h.mustRun("schedule", "invoice", "1", "legacy", "--in", "1h")
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
		if err := st.Driver().CatalogSave(ctx, []driver.CatalogEntry{{Check: "legacy", Awaits: []string{"paid"}}}); err != nil {
			t.Fatal(err)
		}

		if out, err := h.run("checks", "retire", "order_unshipped"); err == nil || !strings.Contains(err.Error(), "take it out of every server first") {
			t.Errorf("retire a check this binary runs: %v\n%s", err, out)
		}
		// A live server that still runs it: refused, unless forced.
		now := time.Now()
		if err := st.Driver().ServerHeartbeat(ctx, &driver.Server{Name: "web-1", StartedAt: now, HeartbeatAt: now, Checks: []string{"legacy"}}); err != nil {
			t.Fatal(err)
		}
		if out, err := h.run("checks", "retire", "legacy"); err == nil || !strings.Contains(err.Error(), "run by live server(s) web-1") ||
			!strings.Contains(err.Error(), "--force") {
			t.Errorf("retire a check a live server runs: %v\n%s", err, out)
		}
		wantContains(t, "retire the invoices' jobs", h.mustRun("checks", "retire", "legacy", "--entity", "invoice", "--force"),
			"check legacy: cancelled 1 pending job(s) of entity invoice")
		if err := st.Driver().ServerDelete(ctx, "web-1", now); err != nil {
			t.Fatal(err)
		}
		wantContains(t, "retire", h.mustRun("checks", "retire", "legacy", "--batch", "2"),
			"check legacy retired: cancelled 3 pending job(s) (history: cancelled, by retire); removed from the catalog")
		wantContains(t, "retire again", h.mustRun("checks", "retire", "legacy"), "nothing to retire")
		var js retireResult
		stdout, stderr, err := h.runCtx(ctx, "checks", "retire", "legacy", "--json")
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(stdout), &js); err != nil || js.Check != "legacy" || js.Cancelled != 0 || js.Uncataloged {
			t.Errorf("retire --json with nothing left: %+v, %v", js, err)
		}
		// A typo must not pass for success unseen, --json or not.
		if !strings.Contains(stderr, "nothing to retire (is the name right?)") {
			t.Errorf("retire --json with nothing to retire: stderr %q, want a note", stderr)
		}

		stats, err := st.Driver().JobStats(ctx, &driver.JobStatsParams{Upcoming: 1})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Pending != 1 || stats.ByCheck["order_unshipped"] != 1 {
			t.Errorf("pending after retiring legacy: %d, %v; want order_unshipped's job alone", stats.Pending, stats.ByCheck)
		}
		recs, err := st.Driver().HistoryList(ctx, history.Filter{Check: "legacy"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4 {
			t.Errorf("history of check legacy: %d records, want 4", len(recs))
		}
		for _, r := range recs {
			if r.Outcome != history.Cancelled || r.FinishedBy != "retire" {
				t.Errorf("history of %s/%s legacy: %s by %s, want cancelled by retire", r.Entity, r.Key, r.Outcome, r.FinishedBy)
			}
		}
		if cat, err := st.Driver().CatalogList(ctx); err != nil || slices.ContainsFunc(cat, func(e driver.CatalogEntry) bool { return e.Check == "legacy" }) {
			t.Errorf("catalog after retiring legacy: %+v, %v", cat, err)
		}
	})
}

// History said "api" for a job an operator cancelled or resolved from the
// command line, as for one the application's code finished: the commands
// say "cli" (the HTTP API, served by run, still says "api").
func TestCommandsFinishJobsAsCLI(t *testing.T) {
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
		h.mustRun("schedule", "order", "2", "order_unshipped", "--in", "1h")
		h.mustRun("cancel", "order", "1")
		h.mustRun("resolve", "order", "2", "shipped")
		recs, err := st.Driver().HistoryList(context.Background(), history.Filter{Entity: "order"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 {
			t.Fatalf("history: %d records, want 2", len(recs))
		}
		for _, r := range recs {
			if r.FinishedBy != "cli" {
				t.Errorf("order %s, %s from the command line: finished by %q, want cli", r.Key, r.Outcome, r.FinishedBy)
			}
		}
	})
}
