package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
)

// complete runs cobra's hidden __complete command, as the shell scripts of
// `prescient completion` do at each Tab, and returns the suggestions
// without their descriptions.
func (h *harness) complete(args ...string) []string {
	h.t.Helper()
	stdout, stderr, err := h.runCtx(context.Background(), append([]string{"__complete"}, args...)...)
	if err != nil {
		h.t.Fatalf("__complete %q: %v\n%s", args, err, stderr)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		if strings.HasPrefix(l, ":") { // the directive ends the list
			break
		}
		name, _, _ := strings.Cut(l, "\t")
		got = append(got, name)
	}
	return got
}

// TestCompletion: shell completion suggests check names (this binary's and
// the database's catalog), event names, outcomes, entity names of pending
// jobs from the database, and the words of --mode, on both stores.
func TestCompletion(t *testing.T) {
	t.Parallel()
	eachStore(t, "", func(t *testing.T, h *harness, st prescient.Store) {
		for _, j := range [][]string{{"order", "1"}, {"order", "2"}, {"payout", "7"}, {"invoice", "9"}, {"order:eu", "3"}} {
			h.mustRun("schedule", j[0], j[1], "order_unshipped", "--in", "1h")
		}
		if err := st.Driver().CatalogSave(context.Background(), []driver.CatalogEntry{
			{Check: "payout_unconfirmed", Awaits: []string{"confirmed", "shipped"}},
		}); err != nil {
			t.Fatal(err)
		}
		entities := []string{"invoice", "order", "order:eu", "payout"}
		checkNames := []string{"order_unshipped", "payout_unconfirmed"}
		outcomes := []string{"done", "resolved", "cancelled", "guard_max_checks", "guard_horizon", "guard_past", "failed"}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"schedule", ""}, entities},
			{[]string{"schedule", "o"}, []string{"order", "order:eu"}},
			{[]string{"schedule", "order", ""}, nil}, // a key: nothing to suggest
			{[]string{"schedule", "order", "1", ""}, checkNames},
			{[]string{"schedule", "order", "1", "pay"}, []string{"payout_unconfirmed"}},
			{[]string{"cancel", "order", "1", ""}, checkNames},
			{[]string{"reschedule", "p"}, []string{"payout"}},
			{[]string{"reschedule", "order", "1", "order_"}, []string{"order_unshipped"}},
			{[]string{"resolve", "order", "1", ""}, []string{"confirmed", "shipped"}},
			{[]string{"jobs", "show", "i"}, []string{"invoice"}},
			{[]string{"jobs", "show", "order", "1", ""}, checkNames},
			{[]string{"jobs", "list", "--entity", ""}, entities},
			{[]string{"jobs", "list", "--check", ""}, checkNames},
			{[]string{"history", "--entity", "pay"}, []string{"payout"}},
			{[]string{"history", "--check", "order"}, []string{"order_unshipped"}},
			{[]string{"history", "--outcome", ""}, outcomes},
			{[]string{"history", "--outcome", "g"}, []string{"guard_max_checks", "guard_horizon", "guard_past"}},
			{[]string{"history", "--outcome", "failed,guard_h"}, []string{"failed,guard_horizon"}},
			{[]string{"history", "--outcome", "done,"}, []string{"done,resolved", "done,cancelled", "done,guard_max_checks", "done,guard_horizon", "done,guard_past", "done,failed"}},
			{[]string{"retry", "--entity", ""}, entities},
			{[]string{"retry", "--check", "payout"}, []string{"payout_unconfirmed"}},
			{[]string{"sweep", "--mode", ""}, []string{"run", "reslot"}},
			{[]string{"schedule", "order", "1", "order_unshipped", "--on-conflict", ""}, []string{"replace", "keep"}},
		} {
			if got := h.complete(tc.args...); !slices.Equal(got, tc.want) {
				t.Errorf("__complete %q = %q, want %q", tc.args, got, tc.want)
			}
		}
	})
}

// TestCompletionWithoutADatabase: without a database to read (an SQLite
// file that does not exist, or a configuration that does not load),
// completion still suggests this binary's checks and events, creates no
// file and prints no error.
func TestCompletionWithoutADatabase(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "missing.db")
	h := sqliteHarness(t, path, "")
	if got := h.complete("schedule", "order", "1", ""); !slices.Equal(got, []string{"order_unshipped"}) {
		t.Errorf("checks without a database: %q, want this binary's order_unshipped", got)
	}
	if got := h.complete("resolve", "order", "1", ""); !slices.Equal(got, []string{"shipped"}) {
		t.Errorf("events without a database: %q, want this binary's shipped", got)
	}
	if got := h.complete("schedule", ""); len(got) != 0 {
		t.Errorf("entities without a database: %q, want none", got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("completion created the SQLite file %s (%v)", path, err)
	}
	broken := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "slots:\n  resolutoin: 5m\n")}
	if got := broken.complete("history", "--check", ""); !slices.Equal(got, []string{"order_unshipped"}) {
		t.Errorf("checks with a broken configuration: %q, want this binary's order_unshipped", got)
	}
}

// TestCompletionScripts: `prescient completion bash|zsh|fish` prints a
// script for each shell that calls back into __complete.
func TestCompletionScripts(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out := h.mustRun("completion", shell)
		if !strings.Contains(out, "__complete") || !strings.Contains(out, "prescient") {
			t.Errorf("completion %s: the script does not call prescient __complete:\n%.300s", shell, out)
		}
	}
}
