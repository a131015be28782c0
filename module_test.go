package prescient_test

import (
	"os"
	"regexp"
	"testing"
)

// The module asks importers for a Go release, not for a patch of it: "go
// 1.26.8" would make every importer's build download that patch.
func TestModuleDoesNotPinAPatchRelease(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+)\.(\d+)(?:\.(\d+))?\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if patch := string(m[3]); patch != "" && patch != "0" {
		t.Errorf("go.mod says go %s.%s.%s: write go %s.%s.0, the release, so that importers need no particular patch", m[1], m[2], patch, m[1], m[2])
	}
	if _, err := os.Stat("LICENSE"); err != nil {
		t.Errorf("the module has no LICENSE file: %v", err)
	}
}
