package statuspage

// How long the page takes over a large pending table, on PostgreSQL:
//
//	go test -run XXX -bench BenchmarkPage -benchtime 20x ./statuspage
//
// It loads PRESCIENT_PAGE_BENCH_JOBS pending jobs (default 1,000,000) and
// PRESCIENT_PAGE_BENCH_HISTORY history records finished in the last day
// (default 100,000), each with one INSERT … SELECT generate_series, into a
// schema of its own (internal/pgtest), then times page loads over real HTTP
// on loopback. Nothing asserts on the figures.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

func benchSize(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func BenchmarkPage(b *testing.B) {
	jobs := benchSize(b, "PRESCIENT_PAGE_BENCH_JOBS", 1_000_000)
	hist := benchSize(b, "PRESCIENT_PAGE_BENCH_HISTORY", 100_000)
	ctx := context.Background()
	url, schema := pgtest.Schema(b)
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	grid := slots.Grid{Resolution: time.Minute, Cycle: time.Hour}
	now := time.Now().UTC()
	current := grid.Floor(now)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	// The pending jobs: spread over 1,000 slots from 20 minutes ago (2% of
	// them overdue) on, over five checks, one of which no server knows.
	began := time.Now()
	if _, err := conn.Exec(ctx, `
		INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, payload, created_at, updated_at)
		SELECT 'order', g::text, (ARRAY['alert', 'escalate', 'remind', 'expire', 'mystery'])[g % 5 + 1],
			$2::timestamptz + (g % 1000 - 20) * interval '1 minute',
			$2::timestamptz + (g % 1000 - 20) * interval '1 minute',
			jsonb_build_object('amount', g % 997), $3, $3
		FROM generate_series(1, $1::int) g`, jobs, current, now); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d pending jobs inserted in %s", jobs, time.Since(began).Round(time.Millisecond))
	began = time.Now()
	if _, err := conn.Exec(ctx, `
		INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
			check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at, finished_at, finished_by)
		SELECT $1::bigint + g, 'invoice', g::text, 'alert',
			CASE WHEN g % 100 = 0 THEN 'failed' WHEN g % 10 = 0 THEN 'cancelled' ELSE 'done' END,
			$3::timestamptz - interval '1 day', $3::timestamptz - interval '1 hour', 1,
			CASE WHEN g % 100 = 0 THEN 5 ELSE 0 END, 1200, 35000,
			CASE WHEN g % 100 = 0 THEN 'look up invoice ' || g || ': context deadline exceeded' END,
			NULL, $3::timestamptz - interval '1 day',
			$3::timestamptz - (g * (86000.0 / $2::int)) * interval '1 second', 'web-1'
		FROM generate_series(1, $2::int) g`, jobs+1, hist, now); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d history records inserted in %s", hist, time.Since(began).Round(time.Millisecond))
	if _, err := conn.Exec(ctx, "ANALYZE prescient_jobs; ANALYZE prescient_history"); err != nil {
		b.Fatal(err)
	}

	reg := &checks.Registry{}
	for _, name := range []string{"alert", "escalate", "remind", "expire"} {
		if err := reg.Register(name, func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil); err != nil {
			b.Fatal(err)
		}
	}
	client, err := prescient.NewClient(st, &prescient.Config{Server: "bench", Grid: grid, Checks: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := client.SyncCatalog(ctx); err != nil {
		b.Fatal(err)
	}
	if err := client.Heartbeat(ctx); err != nil {
		b.Fatal(err)
	}

	load := func(b *testing.B, srv *httptest.Server, path string) {
		b.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	run := func(name string, opts *Opts, path string) {
		srv := httptest.NewServer(New(client, opts))
		defer srv.Close()
		load(b, srv, path) // warm: connections, plans, and the counts when cached
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				load(b, srv, path)
			}
		})
	}
	b.Run("counts", func(b *testing.B) {
		for b.Loop() {
			if _, err := client.Status(ctx, &prescient.StatusOpts{Upcoming: UpcomingDefault, Recent: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	run("overview-uncached", &Opts{CacheFor: -1}, "/")
	run("overview-cached", &Opts{CacheFor: time.Hour}, "/")
	// The defaults, loads back to back for longer than CacheFor: each load
	// past it starts a reading in the background and shows the last one.
	run("overview-default", nil, "/")
	run("history", nil, "/history")
	run("history-failed", nil, "/history?outcome=failed")
	run("history-check", nil, "/history?check=alert&limit=1000")
	run("job", nil, "/job?entity=order&key=123456")
	run("job-check", nil, "/job?entity=order&key=123456&check=escalate")
}
