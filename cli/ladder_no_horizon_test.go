package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
)

// With no horizon (guards.horizon: -1) each check asks for the next stage
// directly, so a ladder of more distinct stage times than max_checks still
// ends guard_max_checks before its last stage. The ladder check was
// skipped whenever the horizon was not positive, so such a ladder loaded
// (found by a review); it is judged too now.
func TestLadderWithoutAHorizonBeyondMaxChecks(t *testing.T) {
	// The engine: check 1 (at the anchor) raises a and asks for 1h; check 2
	// raises b and asks for 2h, which guard_max_checks refuses.
	slot := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)
	if v := (guards.Limits{MaxChecks: 2, Horizon: -1}).Judge(2, slot, slot, slot.Add(time.Hour)); v.Outcome != history.GuardMaxChecks {
		t.Fatalf("setup: the engine's verdict on check 2 asking for stage c: %+v, want guard_max_checks", v)
	}
	const head = "checks:\n  c:\n    entity: order\n    query: SELECT id AS key FROM orders WHERE id = ANY($1)\n"
	for name, yaml := range map[string]string{
		"check's horizon -1": head + "    stages: [{after: 0s, event: a}, {after: 1h, event: b}, {after: 2h, event: c}]\n" +
			"    guards: {horizon: -1, max_checks: 2}\n",
		"server's horizon -1": "guards: {horizon: -1, max_checks: 2}\n" + head +
			"    stages: [{after: 0s, event: a}, {after: 1h, event: b}, {after: 2h, event: c}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, yaml), noEnv)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), "checks.c.stages[2].after") {
				t.Errorf("a ladder of 3 stage times with max_checks 2 and no horizon: %v, want an error on checks.c.stages[2].after", err)
			}
		})
	}
}
