package postgres

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
)

// On a database whose default collation is linguistic (ICU en-US, where
// "_x" < "a" < "A1" < "b" < "B"), entity names, keys and check names still
// compare byte by byte, as Go and the SQLite store compare them (migration
// 00011): listing entities pages in Go's order, and every key column of the
// pending table and of history is COLLATE "C", so the identity index and
// history's entity index compare bytes, not through the locale.
func TestKeysCompareByteWise(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Database(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
	s, err := Open(ctx, url, &Opts{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var linguistic bool
	if err := s.pool.QueryRow(ctx, `SELECT 'a' < 'B'`).Scan(&linguistic); err != nil || !linguistic {
		t.Fatalf("the test database compares 'a' < 'B' = %v (%v); want true, a linguistic default collation", linguistic, err)
	}

	names := []string{"b", "B", "a", "_x", "A1"}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
		SELECT e, e, e, now(), now(), now(), now() FROM unnest($1::text[]) e`, names); err != nil {
		t.Fatal(err)
	}
	sorted := slices.Sorted(slices.Values(names)) // A1 B _x a b
	if got, err := s.JobEntities(ctx, "", 10); err != nil || !slices.Equal(got, sorted) {
		t.Errorf("JobEntities = %q, %v; want Go's order %q", got, err, sorted)
	}
	if got, err := s.JobEntities(ctx, "B", 2); err != nil || !slices.Equal(got, sorted[2:4]) {
		t.Errorf("JobEntities after %q = %q, %v; want %q", "B", got, err, sorted[2:4])
	}

	rows, err := s.pool.Query(ctx, `
		SELECT a.attrelid::regclass || '.' || a.attname || ' ' || coalesce(c.collname, '-')
		FROM pg_attribute a LEFT JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid IN ('prescient_jobs'::regclass, 'prescient_history'::regclass)
			AND a.attname IN ('entity', 'entity_key', 'check_name')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"prescient_history.check_name C", "prescient_history.entity C", "prescient_history.entity_key C",
		"prescient_jobs.check_name C", "prescient_jobs.entity C", "prescient_jobs.entity_key C",
	}
	if !slices.Equal(got, want) {
		t.Errorf("key columns' collations: %q, want %q", got, want)
	}

	// One event's deliveries list, and page, by sink name byte by byte, as
	// on SQLite (found by a review: the default collation ordered them
	// otherwise, skipping none).
	var event int64
	if err := s.pool.QueryRow(ctx, `
		INSERT INTO prescient_outbox (created_at, job_id, entity, entity_key, check_name, stage, event, idempotency_key)
		VALUES (now(), 1, 'order', '1', 'c', 'alert', 'e', 'order/1/c/alert') RETURNING id`).Scan(&event); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO prescient_deliveries (event_id, sink, next_attempt_at, updated_at)
		SELECT $1, n, now(), now() FROM unnest($2::text[]) n`, event, names); err != nil {
		t.Fatal(err)
	}
	sinksOf := func(p *driver.DeliveryListParams) []string {
		ds, err := s.DeliveryList(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range ds {
			out = append(out, d.Sink)
		}
		return out
	}
	if got := sinksOf(&driver.DeliveryListParams{Limit: 10}); !slices.Equal(got, sorted) {
		t.Errorf("deliveries by sink %q, want Go's order %q", got, sorted)
	}
	if got := sinksOf(&driver.DeliveryListParams{BeforeEventID: event, AfterSink: "B", Limit: 10}); !slices.Equal(got, sorted[2:]) {
		t.Errorf("deliveries after sink %q: %q, want %q", "B", got, sorted[2:])
	}
}
