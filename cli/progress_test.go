package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/sqlite"
)

// runTTY runs a command as runCtx does, but with stderr a real terminal: the
// slave side of a new pseudo-terminal cols columns wide. It returns stdout
// and everything the terminal received, read from the master side.
func (h *harness) runTTY(cols uint16, args ...string) (stdout, terminal string, err error) {
	h.t.Helper()
	return h.runOnTTY(cols, false, args...)
}

// runOnTTY is runTTY, with stdout on the terminal too when both is set (a
// person running the command in a shell), returned in terminal.
func (h *harness) runOnTTY(cols uint16, both bool, args ...string) (stdout, terminal string, err error) {
	h.t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		h.t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: cols}); err != nil {
		h.t.Fatalf("size the pseudo-terminal: %v", err)
	}
	var got bytes.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		// Ends with EIO once the slave side is closed and all it received
		// has been read.
		_, _ = io.Copy(&got, ptmx)
	}()
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		h.t.Fatal(err)
	}
	var o syncBuffer
	var out io.Writer = &o
	if both {
		out = tty
	}
	root := NewRootCommand(&Opts{Checks: reg, Out: out, Err: tty, lookupEnv: envOf(h.env)})
	if h.config != "" {
		args = append([]string{"--config", h.config}, args...)
	}
	root.SetArgs(args)
	err = root.ExecuteContext(context.Background())
	tty.Close()
	<-read
	return o.String(), got.String(), err
}

// drawnLines returns the lines a progress drew on a terminal: each text
// between a carriage return and the erase-to-end-of-line after it.
func drawnLines(terminal string) []string {
	var lines []string
	for _, part := range strings.Split(terminal, "\r")[1:] {
		if line, _, ok := strings.Cut(part, "\x1b[K"); ok {
			lines = append(lines, line)
		}
	}
	return lines
}

// overdueJobs leaves n jobs of order_unshipped due in a slot long past, as
// a server that was down would.
func overdueJobs(t *testing.T, path string, n int) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range n {
		if _, err := st.JobSchedule(ctx, nil, []*driver.JobScheduleParams{{
			Entity: "order", Key: string(rune('a' + i)), Check: "order_unshipped", At: past, OnConflict: prescient.ConflictReplace, Now: past,
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// progressCase is a long command, what its progress line first says, what
// it says at the end, and what the command prints on stdout.
type progressCase struct {
	args  []string
	first string
	final string // then the time taken: "(0s)"
	out   string // a regular expression
}

// progressCases run in this order on one SQLite file: sweep finds two
// overdue jobs, whose check fails (there is no orders table) and, with
// retry.max_failures 1, ends them failed; copy then copies their history.
func progressCases(t *testing.T, path string) []progressCase {
	url, schema := pgtest.SchemaName(t)
	return []progressCase{
		{[]string{"migrate"}, "opening the database", "migrated; 1 check(s) recorded", `(?m)^migrated; slot grid`},
		{[]string{"sweep", "--mode", "run"}, "looking for overdue slots", "(run): fired 1 overdue slot(s), checked 2 job(s)",
			`(?m)^sweep \(run\): fired 1 overdue slot\(s\), checked 2 job\(s\)$`},
		{[]string{"copy", "--to", url, "--to-schema", schema}, "checking the target is empty", "0 job(s), 2 history record(s), 0 event(s), 1 catalog entries copied",
			`(?m)^  history records  2$`},
		{[]string{"bench", "--jobs", "20", "--slots", "2"}, "inserting 20 orders", "done", `(?m)^checked\s+20 \(done 20, failures 0\)$`},
	}
}

// TestProgressOnATerminal runs copy, sweep, migrate and bench with stderr
// a real pseudo-terminal (github.com/creack/pty): each draws a progress line
// there, rewritten in place, and ends it with its final state; stdout gets
// the result alone. On a narrow terminal the line is cut to its width.
func TestProgressOnATerminal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "retry:\n  max_failures: 1\n")
	for _, tc := range progressCases(t, path) {
		if tc.args[0] == "sweep" {
			overdueJobs(t, path, 2)
		}
		what := "prescient " + tc.args[0]
		stdout, terminal, err := h.runTTY(200, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v\nterminal:\n%q", what, err, terminal)
		}
		if tc.args[0] == "copy" {
			unmarkCopied(t, path) // copied, the file takes no more writes
		}
		wantMatch(t, what+" stdout", stdout, tc.out)
		if strings.Contains(stdout, "\r") || strings.Contains(stdout, "\x1b") {
			t.Errorf("%s: progress reached stdout:\n%q", what, stdout)
		}
		lines := drawnLines(terminal)
		if len(lines) < 2 {
			t.Fatalf("%s drew %d progress line(s) on the terminal, want at least 2:\n%q", what, len(lines), terminal)
		}
		if want := tc.args[0] + ": " + tc.first + " ("; !strings.HasPrefix(lines[0], want) {
			t.Errorf("%s: first progress line %q, want it to start %q", what, lines[0], want)
		}
		if re := `^` + regexp.QuoteMeta(tc.args[0]+": "+tc.final) + ` \(\d+s\)$`; !regexp.MustCompile(re).MatchString(lines[len(lines)-1]) {
			t.Errorf("%s: last progress line %q, want it to match %s", what, lines[len(lines)-1], re)
		}
		// The final state ends the line (the terminal turns \n into \r\n).
		if !strings.HasSuffix(terminal, "\x1b[K\r\n") {
			t.Errorf("%s: the terminal output does not end with the progress line ended:\n%q", what, terminal)
		}
	}

	// With stdout on the same terminal, as in a shell, what the command
	// prints starts on a line of its own: the progress line is erased or
	// ended first, never continued.
	path2 := filepath.Join(t.TempDir(), "prescient.db")
	h2 := sqliteHarness(t, path2, "retry:\n  max_failures: 1\n")
	for _, tc := range progressCases(t, path2) {
		if tc.args[0] == "copy" {
			continue // its target, emptied once, is the loop's above
		}
		if tc.args[0] == "sweep" {
			overdueJobs(t, path2, 2)
		}
		_, terminal, err := h2.runOnTTY(200, true, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v\nterminal:\n%q", tc.args[0], err, terminal)
		}
		drawn := regexp.MustCompile(`^` + regexp.QuoteMeta(tc.args[0]+": ") + `.* \(\d+s\)$`)
		for l := range strings.SplitSeq(terminal, "\r\n") {
			shown := l[strings.LastIndex(l, "\r")+1:] // a carriage return draws over what came before it
			shown = strings.ReplaceAll(shown, "\x1b[K", "")
			if strings.HasPrefix(shown, tc.args[0]+": ") && !drawn.MatchString(shown) {
				t.Errorf("%s, stdout and stderr on one terminal: the progress line runs into the output: %q", tc.args[0], shown)
			}
		}
	}

	// A line that would wrap on a narrow terminal is cut to its width.
	const cols = 30
	_, terminal, err := h.runTTY(cols, "migrate")
	if err != nil {
		t.Fatal(err)
	}
	lines := drawnLines(terminal)
	if len(lines) < 2 || lines[len(lines)-1] != "migrate: migrated; 1 check(s…" {
		t.Errorf("migrate on a %d-column terminal drew %q, want its last line cut to %q", cols, lines, "migrate: migrated; 1 check(s…")
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > cols-1 {
			t.Errorf("progress line of %d characters on a %d-column terminal (it would wrap): %q", n, cols, l)
		}
	}
}

// TestNoProgressOffATerminal: with stderr a pipe or a file, as in scripts
// (and in every other test), the same commands write no progress at all.
func TestNoProgressOffATerminal(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "prescient.db")
	h := sqliteHarness(t, path, "retry:\n  max_failures: 1\n")
	for _, tc := range progressCases(t, path) {
		if tc.args[0] == "sweep" {
			overdueJobs(t, path, 2)
		}
		stdout, stderr, err := h.runCtx(context.Background(), tc.args...)
		if err != nil {
			t.Fatalf("prescient %s: %v", tc.args[0], err)
		}
		wantMatch(t, "prescient "+tc.args[0]+" stdout", stdout, tc.out)
		all := stdout + stderr
		if strings.Contains(all, "\r") || strings.Contains(all, "\x1b") || strings.Contains(all, tc.first) || strings.Contains(all, tc.final+" (") {
			t.Errorf("prescient %s off a terminal wrote progress:\nstdout %q\nstderr %q", tc.args[0], stdout, stderr)
		}
	}
	// A file is not a terminal either.
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if p := newProgress(f, "copy"); p != nil {
		t.Errorf("newProgress on a file = %+v, want nil (no progress)", p)
	}
}

// fakeClock moves by step at every call.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time {
	c.t = c.t.Add(c.step)
	return c.t
}

// TestProgressLine: the line is drawn at once, then at most every
// progressEvery; done always draws the final state and ends the line; clear
// erases a drawn line; a nil progress does nothing.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), step: 40 * time.Millisecond}
	p := &progress{out: &buf, fd: -1, what: "copy", now: clk.now}
	p.start = p.now()
	p.set("%d job(s) copied", 1000) // drawn: the first
	p.set("%d job(s) copied", 2000) // 40ms later: not drawn
	p.set("%d job(s) copied", 3000) // 80ms after the draw: not drawn
	p.set("%d job(s) copied", 4000) // 120ms after: drawn
	p.done("%d job(s) copied", 4500)
	want := "\rcopy: 1000 job(s) copied (0s)\x1b[K" + "\rcopy: 4000 job(s) copied (0s)\x1b[K" + "\rcopy: 4500 job(s) copied (0s)\x1b[K\n"
	if buf.String() != want {
		t.Errorf("progress wrote\n%q\nwant\n%q", buf.String(), want)
	}

	buf.Reset()
	p = &progress{out: &buf, fd: -1, what: "sweep", now: clk.now}
	p.clear()
	if buf.Len() != 0 {
		t.Errorf("clear before anything was drawn wrote %q", buf.String())
	}
	clk.step = time.Second
	p.start = p.now()
	s := &sweepProgress{p: p}
	s.CheckFinished(prescient.CheckEvent{Check: "c", Outcome: prescient.RunRetry, Err: io.EOF})
	s.CheckFinished(prescient.CheckEvent{Check: "c", Outcome: "done"})
	s.SlotFired(prescient.SlotEvent{Slot: past})
	p.clear()
	lines := drawnLines(buf.String())
	// The last "line" is the one clear erased.
	if len(lines) != 4 || lines[3] != "" || lines[2] != "sweep: 1 overdue slot(s) fired, 2 job(s) checked (1 failed), last slot 2020-01-01T09:00:00Z (3s)" ||
		!strings.HasSuffix(buf.String(), "\r\x1b[K") {
		t.Errorf("sweep progress drew %q", buf.String())
	}

	var none *progress = newProgress(&buf, "bench")
	if none != nil {
		t.Fatalf("newProgress on a buffer = %+v, want nil", none)
	}
	buf.Reset()
	none.set("x")
	none.done("y")
	none.clear()
	if buf.Len() != 0 {
		t.Errorf("a nil progress wrote %q", buf.String())
	}
}
