package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestJobEntities lists the distinct entities of 20,000 pending jobs, pages
// through them, and checks from the plan that the query skips along the
// (entity, entity_key, check_name) index, reading a few entries per name
// returned, never scanning the table.
func TestJobEntities(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	s, err := Open(ctx, url, &Opts{Schema: schema, MaxConns: 2})
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
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT (ARRAY['payout', 'order', 'signup', 'invoice', 'order:eu'])[1 + i % 5], i::text, 'c', now(), now(), now(), now()
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE prescient_jobs`); err != nil {
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

	var plan []struct {
		Plan map[string]any `json:"Plan"`
	}
	var raw []byte
	if err := s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+jobEntitiesSQL, "", 100).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", raw, err)
	}
	var scans []string
	read := 0.0
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		typ, _ := n["Node Type"].(string)
		if strings.Contains(typ, "Scan") && n["Relation Name"] == "prescient_jobs" {
			scans = append(scans, typ+" "+fmtAny(n["Index Name"]))
			rows, _ := n["Actual Rows"].(float64)
			loops, _ := n["Actual Loops"].(float64)
			read += rows * loops
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(plan[0].Plan)
	if len(scans) == 0 {
		t.Fatalf("no scan of prescient_jobs in the plan: %s", raw)
	}
	for _, sc := range scans {
		if !strings.HasPrefix(sc, "Index") || !strings.HasSuffix(sc, "prescient_jobs_identity") {
			t.Errorf("plan scans prescient_jobs with %s, want an index scan of prescient_jobs_identity:\n%s", sc, raw)
		}
	}
	if read > 2*float64(len(all)) {
		t.Errorf("the walk read %.0f index entries for %d entities (want at most %d): not a loose index scan:\n%s", read, len(all), 2*len(all), raw)
	}
}

func fmtAny(v any) string {
	s, _ := v.(string)
	return s
}
