package prescient_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// closedOn is a driver that sends one step of Start to a closed store, so
// that it fails with the store's own error, and the others to a live one.
type closedOn struct {
	driver.Driver
	closed driver.Driver
	step   string
}

func (d closedOn) GridSave(ctx context.Context, g slots.Grid) error {
	if d.step == "grid" {
		return d.closed.GridSave(ctx, g)
	}
	return d.Driver.GridSave(ctx, g)
}

func (d closedOn) CatalogSave(ctx context.Context, es []driver.CatalogEntry) error {
	if d.step == "catalog" {
		return d.closed.CatalogSave(ctx, es)
	}
	return d.Driver.CatalogSave(ctx, es)
}

func (d closedOn) ServerHeartbeat(ctx context.Context, s *driver.Server) error {
	if d.step == "heartbeat" {
		return d.closed.ServerHeartbeat(ctx, s)
	}
	return d.Driver.ServerHeartbeat(ctx, s)
}

func doneAtOnce(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }

// TestStartErrorsSayEachContextOnce: an error of Start names "prescient",
// "start" and what failed once each, where it read "start: save grid: save
// grid:" and "start: prescient: heartbeat: heartbeat of server".
func TestStartErrorsSayEachContextOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(name string) *sqlite.Store {
		s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), name), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	live := open("live.db")
	t.Cleanup(live.Close)
	closed := open("closed.db")
	closed.Close()
	for _, tt := range []struct {
		step string
		once []string // each appears exactly once
	}{
		{"grid", []string{"prescient:", "start", "save grid", "database is closed"}},
		{"catalog", []string{"prescient:", "start", "database is closed"}},
		{"heartbeat", []string{"prescient:", "start", "heartbeat", "database is closed"}},
	} {
		t.Run(tt.step, func(t *testing.T) {
			st := wrappedStore{live, closedOn{Driver: live, closed: closed, step: tt.step}}
			c, err := prescient.NewClient(st, &prescient.Config{Server: "s1", Checks: register(t, "c", doneAtOnce, nil),
				SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Start(ctx)
			if err == nil {
				c.Stop(ctx)
				t.Fatal("Start succeeded, want an error")
			}
			for _, s := range tt.once {
				if n := strings.Count(err.Error(), s); n != 1 {
					t.Errorf("Start: %q says %q %d times, want once", err, s, n)
				}
			}
		})
	}
}

// Reschedule, cancel and resolve errors name the job once: the driver's
// error already does.
func TestRescheduleErrorNamesTheJobOnce(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		c := h.client(newClock("2026-03-10T10:00:00Z"), register(t, "verify", doneAtOnce, nil), nil)
		_, err := c.Reschedule(context.Background(), "signup", "nope", "verify", ts("2026-03-10T11:00:00Z"))
		if !errors.Is(err, prescient.ErrNotFound) || strings.Count(err.Error(), "signup/nope/verify") != 1 {
			t.Errorf("Reschedule of a missing job: %v, want ErrNotFound naming the job once", err)
		}
	})
}
