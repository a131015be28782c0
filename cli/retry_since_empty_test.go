package cli

import (
	"path/filepath"
	"testing"
)

// retry now refuses an empty --entity, --key or --check, because an unset
// "$CHECK" widened it to every failed job. --since is a filter of the same
// command ("Filters combine: ... --since"), and an unset "$SINCE" in
// `prescient retry --since "$SINCE"` widened "failed in the last 24h"
// to every failed record, silently (found by a review); it is refused too.
func TestRetryRefusesAnEmptySince(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate")
	if out, err := h.run("retry", "--dry-run", "--since", ""); err == nil {
		t.Errorf("retry --since \"\" accepted (every failed record, whatever its age):\n%s", out)
	}
}
