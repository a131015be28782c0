package prescient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// A failing check is logged at WARN while it will be retried and at ERROR
// when its job failed for good: an operator alerting on WARN and above must
// see a check that keeps failing (it was INFO, found by a new user's trial).
func TestCheckFailuresLoggedAtWarnAndError(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	var buf bytes.Buffer
	failing := func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, errors.New("orders service unreachable")
	}
	c := h.client(clk, register(t, "c", failing, nil), func(cfg *prescient.Config) {
		cfg.MaxFailures = 2
		cfg.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	})
	schedule(t, c, "k", "c", "2026-03-10T10:15:00Z")
	for _, now := range []string{"2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z", "2026-03-10T10:45:00Z", "2026-03-10T11:00:00Z"} {
		clk.Set(now)
		c.Tick(ctx)
	}
	levels := map[string][]string{}
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var rec struct{ Level, Msg, Error string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if strings.Contains(rec.Error, "orders service unreachable") {
			levels[rec.Msg] = append(levels[rec.Msg], rec.Level)
		}
	}
	if got := strings.Join(levels["check failed, will retry"], ","); got != "WARN" {
		t.Errorf(`"check failed, will retry" logged at %q, want WARN once`, got)
	}
	if got := strings.Join(levels["job failed for good"], ","); got != "ERROR" {
		t.Errorf(`"job failed for good" logged at %q, want ERROR once`, got)
	}
	if t.Failed() {
		t.Logf("log:\n%s", buf.String())
	}
}
