package cli

import (
	"context"
	"encoding/json"
	"time"

	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// TestHistoryRefusesInvalidNames: like every other operator command (jobs
// list, jobs show, cancel, resolve, retry), history refuses an entity or
// check name that no job can have, saying which name and why; it once
// answered "no history records match", as if the name had no history.
func TestHistoryRefusesInvalidNames(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate")
	for _, args := range [][]string{
		{"history", "--entity", "or der"},
		{"history", "--check", "bad check"},
		{"history", "--outcome", "failed", "--check", "order unshipped"},
	} {
		out, err := h.run(args...)
		if err == nil {
			t.Errorf("prescient %s: no error; output:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !strings.Contains(err.Error(), "invalid") {
			t.Errorf("prescient %s: %v; want an error naming the invalid name", strings.Join(args, " "), err)
		}
	}
	// For comparison: jobs list and retry refuse the same name.
	if _, err := h.run("jobs", "list", "--entity", "or der"); err == nil {
		t.Errorf("jobs list --entity 'or der': no error")
	}
}

// TestJobsShowHintIsShellSafe: the hint jobs show prints when older
// history exists must, pasted into a shell, name the same entity key (and
// the check shown). It once quoted the key with Go's strconv.Quote, in
// double quotes, where a POSIX shell expands $ and backquotes.
func TestJobsShowHintIsShellSafe(t *testing.T) {
	t.Parallel()
	h := sqliteHarness(t, filepath.Join(t.TempDir(), "prescient.db"), "")
	h.mustRun("migrate")
	const key = `k$HOME`
	for range 3 {
		h.mustRun("schedule", "order", key, "order_unshipped", "--at", "2030-01-01T10:07:00Z")
		h.mustRun("cancel", "order", key)
	}
	out := h.mustRun("jobs", "show", "order", key, "order_unshipped", "--history", "1")
	m := regexp.MustCompile(`or (prescient history .*)\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("jobs show --history 1 of 3 records: no hint to older records:\n%s", out)
	}
	// What a shell makes of the hint's words.
	sh, err := exec.Command("sh", "-c", `for a in `+strings.TrimPrefix(m[1], "prescient ")+`; do printf '%s\n' "$a"; done`).Output()
	if err != nil {
		t.Fatalf("sh: %v", err)
	}
	words := strings.Split(strings.TrimSuffix(string(sh), "\n"), "\n")
	gotKey := ""
	for i, w := range words {
		if w == "--key" && i+1 < len(words) {
			gotKey = words[i+1]
		}
	}
	if gotKey != key {
		t.Errorf("the hint %q gives the shell the key %q, want %q", m[1], gotKey, key)
	}
	if !strings.Contains(m[1], "--check order_unshipped") {
		t.Errorf("the hint %q drops the check shown (order_unshipped): it lists every check's history", m[1])
	}
}

// TestRetrySkipsWhatCannotBeScheduled: one failed record whose job cannot
// be scheduled again (a key with a tab, which an older version stored) is
// skipped with its reason, and the others are retried; it once stopped
// the whole retry, and with --json printed a text table on stdout.
func TestRetrySkipsWhatCannotBeScheduled(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "")
	h.mustRun("migrate")
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	importHistory(t, st, &history.Record{ID: 1, Entity: "order", Key: "bad\tkey", Check: "order_unshipped",
		Outcome: history.Failed, FinishedAt: time.Now().Add(-2 * time.Hour)})
	importHistory(t, st, &history.Record{ID: 2, Entity: "order", Key: "42", Check: "order_unshipped",
		Outcome: history.Failed, FinishedAt: time.Now().Add(-time.Hour)})
	out, err := h.run("retry", "--json")
	if err != nil {
		t.Fatalf("retry --json: %v\n%s", err, out)
	}
	var res struct {
		Retried []struct{ Failed struct{ Key string } }
		Skipped []struct {
			Failed  struct{ Key string }
			Skipped string
		}
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("retry --json printed no JSON document: %v\n%s", err, out)
	}
	if len(res.Retried) != 1 || res.Retried[0].Failed.Key != "42" || len(res.Skipped) != 1 ||
		res.Skipped[0].Failed.Key != "bad\tkey" || !strings.Contains(res.Skipped[0].Skipped, "cannot schedule") {
		t.Fatalf("retry --json: %+v, want 42 retried and the bad key skipped, saying it cannot be scheduled", res)
	}
	h.mustRun("cancel", "order", "42")
	text := h.mustRun("retry", "--dry-run")
	if !strings.Contains(text, `bad\tkey`) || strings.Contains(text, "bad\tkey") {
		t.Errorf("retry --dry-run shows the skipped key unescaped or not at all:\n%s", text)
	}
}

// TestKeyBeginningWithADash: a key such as -5 read as a flag gets an error
// that says how to pass it, and the form it gives works (found by a trial of
// bad input: "unknown shorthand flag: '5' in -5" said nothing of it).
func TestKeyBeginningWithADash(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "")
	h.mustRun("migrate")
	_, err := h.run("schedule", "order", "-5", "order_unshipped", "--in", "1h")
	if err == nil || !strings.Contains(err.Error(), `goes after "--", every flag before it: prescient schedule [flags] -- ENTITY KEY CHECK`) {
		t.Fatalf("schedule order -5: %v, want the hint to put the key after --", err)
	}
	h.mustRun("schedule", "--in", "1h", "--", "order", "-5", "order_unshipped")
	if out := h.mustRun("jobs", "list", "--entity", "order", "--json"); !strings.Contains(out, `"key":"-5"`) && !strings.Contains(out, `"key": "-5"`) {
		t.Fatalf("the job of key -5 is not pending after the form the hint gives:\n%s", out)
	}
	// A mistyped flag of a command without arguments gets no such hint.
	if _, err := h.run("status", "-x"); err == nil || strings.Contains(err.Error(), `"--"`) {
		t.Errorf("status -x: %v, want the flag error alone", err)
	}
}

// TestNamesWrittenIntoTheTablesAreShownEscaped: an entity, check or server
// name with terminal escapes, written straight into the tables (the tables
// take any text; a role that may call prescient_schedule may write them),
// is printed escaped as keys and errors are, not raw to the terminal (found
// by a security review: jobs list and status printed them as they were).
func TestNamesWrittenIntoTheTablesAreShownEscaped(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "")
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "1", "order_unshipped", "--in", "1h")
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DB().Exec(`UPDATE prescient_jobs SET entity = 'ord' || char(27) || '[31mRED', check_name = 'chk' || char(27) || ']0;T' || char(7)`); err != nil {
		t.Fatal(err)
	}
	importHistory(t, st, &history.Record{ID: 900, Entity: "inv\x1b[2J", Key: "7", Check: "c\x1b[1m", Outcome: history.Failed,
		FinishedAt: time.Now().Add(-time.Minute), FinishedBy: "web\x1b[5m"})
	for _, args := range [][]string{{"jobs", "list"}, {"status"}, {"history"}, {"retry", "--dry-run"}} {
		out := h.mustRun(args...)
		if strings.ContainsAny(out, "\x1b\x07") {
			t.Errorf("%s printed a terminal escape raw:\n%q", strings.Join(args, " "), out)
		}
	}
	wantContains(t, "jobs list", h.mustRun("jobs", "list"), `ord\x1b[31mRED`)
}
