package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestJobEntities lists the distinct entities of 20,000 pending jobs, pages
// through them, and checks from the query plan that every step seeks along
// the (entity, entity_key, check_name) index rather than scanning the table.
func TestJobEntities(t *testing.T) {
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
	if got, err := s.JobEntities(ctx, "", 10); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("JobEntities on an empty table = %#v, %v; want an empty list", got, err)
	}
	if _, err := s.db.ExecContext(ctx, `
		WITH RECURSIVE i(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM i WHERE n < 20000)
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT CASE n % 5 WHEN 0 THEN 'payout' WHEN 1 THEN 'order' WHEN 2 THEN 'signup' WHEN 3 THEN 'invoice' ELSE 'order:eu' END,
			CAST(n AS TEXT), 'c', 0, 0, 0, 0
		FROM i`); err != nil {
		t.Fatal(err)
	}
	all := []string{"invoice", "order", "order:eu", "payout", "signup"}
	for _, tc := range []struct {
		after string
		limit int
		want  []string
	}{
		{"", 10, all},
		{"", 2, all[:2]},
		{"order", 2, []string{"order:eu", "payout"}},
		{"payout", 10, []string{"signup"}},
		{"signup", 10, []string{}},
		{"", 0, []string{}},
	} {
		got, err := s.JobEntities(ctx, tc.after, tc.limit)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("JobEntities(%q, %d) = %q, %v; want %q", tc.after, tc.limit, got, err, tc.want)
		}
	}

	plan := queryPlan(t, s, jobEntitiesSQL, "", 100)
	seeks := 0
	for _, d := range plan {
		if strings.Contains(d, "prescient_jobs") || strings.Contains(d, " j ") || strings.HasSuffix(d, " j") {
			if strings.HasPrefix(d, "SCAN") {
				t.Errorf("plan step %q scans the table", d)
			}
		}
		if strings.HasPrefix(d, "SEARCH") && strings.Contains(d, "sqlite_autoindex_prescient_jobs") && strings.Contains(d, "(entity>?)") {
			seeks++
		}
	}
	if seeks != 2 {
		t.Errorf("plan has %d seeks on the (entity, entity_key, check_name) index, want 2 (the first step and the recursive one):\n%s", seeks, strings.Join(plan, "\n"))
	}
}

// queryPlan returns the steps of SQLite's plan for query with args, as
// EXPLAIN QUERY PLAN details them.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.db.QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var steps []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		steps = append(steps, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}
