package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestHistorySinceInTheFuture: a --since in the future (a mistyped year)
// printed "no history records match" alone, which reads as "nothing
// finished"; a note on stderr says why (found by a trial of bad input).
func TestHistorySinceInTheFuture(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+db+"\n")}
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	h.mustRun("cancel", "order", "1")
	out, errOut, err := h.runCtx(context.Background(), "history", "--since", "2199-01-01T00:00:00Z")
	if err != nil || !strings.Contains(out, "no history records match") ||
		!strings.Contains(errOut, "--since 2199-01-01T00:00:00Z is in the future") {
		t.Errorf("history --since 2199: %v\nstdout:\n%s\nstderr:\n%s\nwant no records and a note that --since is in the future", err, out, errOut)
	}
	// The same with --json, whose stdout stays the document.
	out, errOut, err = h.runCtx(context.Background(), "history", "--since", "2199-01-01T00:00:00Z", "--json")
	if err != nil || strings.TrimSpace(out) != "[]" || !strings.Contains(errOut, "is in the future") {
		t.Errorf("history --since 2199 --json: %v\nstdout:\n%s\nstderr:\n%s\nwant [] and the note on stderr", err, out, errOut)
	}
	// A --since in the past that matches nothing has no such note.
	out, errOut, err = h.runCtx(context.Background(), "history", "--since", "1s", "--check", "order_escalate")
	if err != nil || !strings.Contains(out, "no history records match") || errOut != "" {
		t.Errorf("history --since 1s: %v\nstdout:\n%s\nstderr:\n%s\nwant no records and no note", err, out, errOut)
	}
}
