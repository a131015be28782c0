package cli

import (
	"strings"
	"testing"
)

// The table's legend explains a * only when a cell has one.
func TestChecksLegend(t *testing.T) {
	server := checkInfo{Name: "a", Kind: "go", Guards: guardsInfo{MaxChecks: 10, Runtime: "30s", Horizon: "720h0m0s"}}
	own := server
	own.Name, own.Guards.Own = "b", []string{"runtime"}
	for _, tc := range []struct {
		name      string
		list      []checkInfo
		want, not string
	}{
		{"server's guards only", []checkInfo{server}, "(every guard is the server's; -1: no limit)", "*"},
		{"a check's own guard", []checkInfo{server, own}, "(* the check's own guard; the others are the server's; -1: no limit)", "every guard"},
	} {
		var out strings.Builder
		if err := printChecks(&out, tc.list, false); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) || strings.Contains(out.String(), tc.not) {
			t.Errorf("%s: printed\n%s\nwant %q and no %q", tc.name, out.String(), tc.want, tc.not)
		}
	}
}
