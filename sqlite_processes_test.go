package prescient_test

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// The slot the server process fires in TestSQLiteWriterInAnotherProcess…:
// groups of one check each, every check slowGroup long.
const (
	procSlot      = "2026-03-10T10:15:00Z"
	procGroups    = 40
	procSlowGroup = 100 * time.Millisecond
)

// TestSQLiteWriterInAnotherProcessWaitsForOneGroup: a server in one process
// runs a slot of slow checks, one group after the other, each holding the
// database's write lock; writes from another process (an application's
// Schedule, a transaction of its own through Store.WriteTx, a second
// server's heartbeat) wait for the group running now, not for the server's
// whole run of groups. Before the stores of all processes queued their
// writes through a lock file beside the database, such a write polled
// SQLite's busy handler, the server handed the lock from one group to the
// next at once, and the write failed "database is locked" after its busy
// timeout, though each group was far shorter (a review: 200 ms groups, a 2 s
// busy timeout, Schedule failing 11 groups into a 40-group slot).
func TestSQLiteWriterInAnotherProcessWaitsForOneGroup(t *testing.T) {
	if path := os.Getenv("PRESCIENT_TEST_SERVER_DB"); path != "" {
		serveSlowSlot(t, path)
		return
	}
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "prescient.db")
	// The writers' store: a busy timeout of a few groups, far under the
	// slot's 40 groups.
	const busy = 10 * procSlowGroup
	h, s := openSQLiteFile(t, path, &sqlite.Opts{BusyTimeout: busy})
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "slow", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, nil
	}, nil), func(c *prescient.Config) { c.Server = "writer" })
	for i := range procGroups {
		schedule(t, c, strconv.Itoa(i+1), "slow", procSlot)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteWriterInAnotherProcessWaitsForOneGroup$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "PRESCIENT_TEST_SERVER_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	var log strings.Builder
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The server process says when its first check runs.
	for line := range lines {
		log.WriteString(line + "\n")
		if line == "server: slot under way" {
			break
		}
	}

	// Writes of each kind, one after the other, while the slot runs.
	var failed []string
	writes := []struct {
		what string
		do   func() error
	}{
		{"Schedule", func() error {
			_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "new-1", Check: "slow", At: ts("2026-03-10T11:00:00Z")})
			return err
		}},
		{"WriteTx", func() error {
			return s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: "order", Key: "new-2", Check: "slow", At: ts("2026-03-10T11:00:00Z")})
				return err
			})
		}},
		{"Heartbeat", func() error { return c.Heartbeat(ctx) }},
		{"Cancel", func() error { _, err := c.Cancel(ctx, "order", "new-1", "slow"); return err }},
	}
	for _, w := range writes {
		began := time.Now()
		err := w.do()
		took := time.Since(began).Round(time.Millisecond)
		if err != nil {
			failed = append(failed, w.what+" after "+took.String()+": "+err.Error())
		}
		t.Logf("%s took %s", w.what, took)
	}
	for line := range lines {
		log.WriteString(line + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the server process: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "server: slot done") {
		t.Fatalf("the server process did not finish its slot:\n%s", log.String())
	}
	for _, f := range failed {
		t.Errorf("%s, want it to wait for the group running now (%s), well within its busy timeout %s", f, procSlowGroup, busy)
	}
	// Every job of the slot ran once, in the server process.
	for i := range procGroups {
		wantOutcome(t, c, strconv.Itoa(i+1), history.Done, 1)
	}
}

// serveSlowSlot is the server process of
// TestSQLiteWriterInAnotherProcessWaitsForOneGroup: it fires the slot of the
// jobs the test scheduled in path, one slow check per group, and says on
// stdout when the first check runs and when the slot is done.
func serveSlowSlot(t *testing.T, path string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, &sqlite.Opts{BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := &harness{t: t, store: s} // the test process made the tables
	started := make(chan struct{}, procGroups)
	check := func(context.Context, *checks.Job) (time.Time, error) {
		started <- struct{}{}
		time.Sleep(procSlowGroup) // a slow check holding the write lock, not a synchronisation
		return time.Time{}, nil
	}
	clk := newClock(procSlot)
	c := h.client(clk, register(t, "slow", check, nil), func(c *prescient.Config) {
		c.Server, c.GroupSize = "server", 1
	})
	go func() {
		<-started
		os.Stdout.WriteString("server: slot under way\n")
	}()
	rec, err := c.FireSlot(ctx, ts(procSlot))
	if err != nil {
		t.Fatalf("fire the slot: %v", err)
	}
	if rec.Checked != procGroups {
		t.Fatalf("the slot checked %d jobs, want %d", rec.Checked, procGroups)
	}
	os.Stdout.WriteString("server: slot done\n")
}
