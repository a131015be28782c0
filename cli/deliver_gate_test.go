package cli

import (
	"strings"
	"testing"
	"time"
)

// TestRunMigrateDeliveryWaits: `run --migrate` with sinks on a database not
// migrated yet started its delivery workers before the migration ended,
// and they warned "cannot read the due deliveries ... run prescient
// migrate" while it ran (found by a trial of a move to PostgreSQL). They
// start once the server is built, its store migrated.
func TestRunMigrateDeliveryWaits(t *testing.T) {
	t.Parallel()
	h, _, _ := dbHarness(t, "sinks:\n  ops:\n    type: log\n")
	s := startRun(t, h, "--migrate")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(s.stderr.String(), `msg=serving`) && time.Now().Before(deadline) {
		s.running(t)
		time.Sleep(20 * time.Millisecond)
	}
	// Workers started early poll while the migration runs, before the
	// server serves: their warnings are in the log by then.
	if logs := s.stderr.String(); !strings.Contains(logs, "msg=serving") || strings.Contains(logs, "cannot read the due deliveries") {
		t.Errorf("run --migrate with a sink on a fresh database: logs\n%s\nwant it serving, and no warning of deliveries it could not read", logs)
	}
}
