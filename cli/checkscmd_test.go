package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
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

// A Go check that watches one entity (checks.Opts.Entity) is listed with
// it, as a declared check is.
func TestChecksListAGoChecksEntity(t *testing.T) {
	reg := &checks.Registry{}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	if err := reg.Register("invoice_unsent", noop, &checks.Opts{Entity: "invoice"}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("anything", noop, nil); err != nil {
		t.Fatal(err)
	}
	e := &env{opts: (&Opts{Checks: reg}).withDefaults()}
	list := e.checkList(DefaultConfig())
	got := map[string]string{}
	for _, c := range list {
		got[c.Name] = c.Entity
	}
	if got["invoice_unsent"] != "invoice" || got["anything"] != "" {
		t.Errorf("entities listed: %v, want invoice for invoice_unsent and none for anything", got)
	}
}
