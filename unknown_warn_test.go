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

// TestUnknownCheckWarnedHourly: jobs of a check no server runs (a name
// misspelt through the SQL API, which cannot refuse it) are found again by
// every firing of their slot and every sweep, and each warned of them: on a
// 5-second sweep, a warning every 5 seconds, forever (found by a trial of
// the SQL API from Python). A server warns once per check per hour; the
// firings between say it at debug level.
func TestUnknownCheckWarnedHourly(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	clk := newClock("2026-03-10T10:00:00Z")
	app := h.client(clk, &checks.Registry{}, nil) // an application's client: it runs no check
	schedule(t, app, "1", "nope", "2026-03-10T10:15:00Z")
	logs := &lockedBuffer{}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	srv := h.client(clk, register(t, "c", noop, nil), func(c *prescient.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	warnings := func() (warn, debug int) {
		for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
			var rec struct{ Level, Msg, Check string }
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			if strings.HasPrefix(rec.Msg, "jobs left pending: no check registered") && rec.Check == "nope" {
				switch rec.Level {
				case "WARN":
					warn++
				case "DEBUG":
					debug++
				}
			}
		}
		return warn, debug
	}
	for _, now := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:20:00Z", "2026-03-10T10:25:00Z"} {
		clk.Set(now)
		fire(t, srv, "2026-03-10T10:15:00Z")
	}
	if warn, debug := warnings(); warn != 1 || debug != 2 {
		t.Errorf("three firings within the hour: %d warnings, %d debug lines; want 1 and 2", warn, debug)
	}
	clk.Set("2026-03-10T11:16:00Z")
	fire(t, srv, "2026-03-10T10:15:00Z")
	if warn, _ := warnings(); warn != 2 {
		t.Errorf("a firing over an hour after the warning: %d warnings in all; want a second one", warn)
	}
	if got := srv.UnknownChecks(); got["nope"] != 1 {
		t.Errorf("UnknownChecks = %v; want nope: 1", got)
	}
}
