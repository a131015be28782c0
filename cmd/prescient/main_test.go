package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCarriesTheTimeZoneDatabase: the stock binary embeds time/tzdata, so
// that a declared check with a timestamp anchor, read in the database
// session's TimeZone (Europe/Paris, say), works on a host with no zoneinfo
// (a FROM scratch image), where time.LoadLocation would otherwise fail. The
// host running the tests has zoneinfo, so the test asks the build instead.
func TestCarriesTheTimeZoneDatabase(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "time/tzdata" {
			return
		}
	}
	t.Errorf("cmd/prescient does not import time/tzdata; its dependencies:\n%s", out)
}
