package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/history"
)

// TestHistoryOfAnEntityWalksNewestFirst: history filtered by an entity
// without a key read every record of the entity through the (entity,
// entity_key, finished_at) index and sorted them (1.2-1.6 s at 900,000
// records; found by a trial of history at scale). It walks finished_at
// newest first to the limit, with no sort, as with no filter; a key still
// seeks the entity index. No ANALYZE: prescient runs none on SQLite.
func TestHistoryOfAnEntityWalksNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `
		WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 20000)
		INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at, check_count,
			failure_count, runtime_us, lateness_us, created_at, finished_at, finished_by)
		SELECT n, CASE WHEN n % 10 = 0 THEN 'payout' ELSE 'order' END, CAST(n AS TEXT), 'c', 'done', 0, 1, 0, 0, 0, 0, n, 's'
		FROM i`); err != nil {
		t.Fatal(err)
	}
	plan := func(f history.Filter) string {
		t.Helper()
		q, args, err := historyListSQL(f)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(queryPlan(t, s, q, args...), "; ")
	}
	if p := plan(history.Filter{Entity: "order"}); strings.Contains(p, "TEMP B-TREE") || !strings.Contains(p, "prescient_history_finished") {
		t.Errorf("history of entity order: plan %q; want a walk of prescient_history_finished, no sort", p)
	}
	if p := plan(history.Filter{Entity: "order", Key: "42"}); !strings.Contains(p, "prescient_history_entity") {
		t.Errorf("history of order 42: plan %q; want a seek of prescient_history_entity", p)
	}
	recs, err := s.HistoryList(ctx, history.Filter{Entity: "payout", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Key != "20000" || recs[2].Key != "19980" || !recs[0].FinishedAt.Equal(time.UnixMicro(20000)) {
		t.Errorf("newest 3 payouts: %v; want 20000, 19990, 19980", recs)
	}
}
