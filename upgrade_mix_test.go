package prescient_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// TestStaticServerWarnsOfOlderServers: in a rolling upgrade, servers of an
// older prescient (which do not record how they own positions) owning
// automatically counted a new static server as automatic and left it
// positions it did not fire: 100 jobs waited 1-2 minutes for the sweep
// (found by a trial of a rolling upgrade). A server started with static
// ownership beside such servers now warns, naming them.
func TestStaticServerWarnsOfOlderServers(t *testing.T) {
	t.Parallel()
	h := openPostgres(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	if err := h.store.Driver().ServerHeartbeat(ctx, &driver.Server{Name: "old-1", StartedAt: clk.Now(), HeartbeatAt: clk.Now(),
		Positions: []int{0, 1, 2, 3}, Timeout: 3 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*prescient.Config)
		warn bool
	}{
		{"static", func(c *prescient.Config) { c.Ownership = slots.Ownership{"new-1": {0, 1, 2, 3}} }, true},
		{"every position", func(c *prescient.Config) {}, false},
		{"automatic", func(c *prescient.Config) { c.AutoOwnership = true }, false},
	} {
		var log bytes.Buffer
		c := h.client(clk, &checks.Registry{}, func(c *prescient.Config) {
			c.Server, c.Logger = "new-1", slog.New(slog.NewTextHandler(&log, nil))
			tc.mod(c)
		})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(log.String(), "live servers of an older prescient") && strings.Contains(log.String(), "old-1")
		if warned != tc.warn {
			t.Errorf("%s ownership beside a live server of an older prescient: warned %v, want %v; log:\n%s", tc.name, warned, tc.warn, log.String())
		}
	}
}
