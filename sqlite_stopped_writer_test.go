//go:build linux

package prescient_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/sqlite"
)

// TestSQLiteStoppedWriterStallsNoOne: an operator's `prescient schedule`
// (here: another process's Schedule) waits behind a write that holds the
// database's lock, and is stopped there (Ctrl-Z, a paused container). A
// process that waits for SQLite's lock holds none of it. The write queue's
// first version had waiters hold its file lock exclusively, so a stopped
// waiter held up every writer of every process for as long as it stayed
// stopped: the server's heartbeat failed after its busy timeout and a slot
// could not start (found by a review). Waiters now hold the file shared,
// which no writer waits for; a server's group lets them go first for at
// most a short while (yieldMax).
func TestSQLiteStoppedWriterStallsNoOne(t *testing.T) {
	if path := os.Getenv("PRESCIENT_TEST_WRITER_DB"); path != "" {
		scheduleOneWaiting(t, path)
		return
	}
	t.Parallel()
	ctx := context.Background()
	const busy = 500 * time.Millisecond
	path := filepath.Join(t.TempDir(), "prescient.db")
	h, s := openSQLiteFile(t, path, &sqlite.Opts{BusyTimeout: busy})
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, register(t, "quick", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, nil
	}, nil), nil)
	schedule(t, c, "1", "quick", "2026-03-10T10:15:00Z")

	// A write of the application's holds the database's lock (a group of
	// checks would do the same) while the other process's Schedule comes.
	hold, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES ('o1', 'placed')`); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSQLiteStoppedWriterStallsNoOne$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PRESCIENT_TEST_WRITER_DB="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitQueueAnnounced(t, path+"-queue")
	// Stopped while it waits.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Only once it has stopped does the lock come free: a process still
	// running for a moment after the signal would take the lock, and then
	// stop holding it.
	waitStopped(t, cmd.Process.Pid)
	if err := hold.Rollback(); err != nil {
		t.Fatal(err)
	}

	// No process holds the database's lock now.
	began := time.Now()
	if err := c.Heartbeat(ctx); err != nil {
		t.Errorf("heartbeat with no write running, beside a stopped process that waited for the lock: %v after %s; want it to succeed at once",
			err, time.Since(began).Round(time.Millisecond))
	}
	clk.Set("2026-03-10T10:15:00Z")
	fireCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := c.FireSlot(fireCtx, ts("2026-03-10T10:15:00Z")); err != nil {
		t.Errorf("fire a slot of one quick check beside a stopped process that waited for the lock: %v; want it done", err)
	} else {
		wantOutcome(t, c, "1", history.Done, 1)
	}
}

// scheduleOneWaiting is the other process of
// TestSQLiteStoppedWriterStallsNoOne: one Schedule, waiting up to
// a minute for the lock.
func scheduleOneWaiting(t *testing.T, path string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, path, &sqlite.Opts{BusyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := prescient.NewClient(s, &prescient.Config{Server: "cli", Grid: quarterHours, Checks: register(t, "quick", func(context.Context, *checks.Job) (time.Time, error) {
		return time.Time{}, nil
	}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "2", Check: "quick", At: ts("2026-03-10T11:00:00Z")}); err != nil {
		t.Fatal(err)
	}
}

// waitQueueAnnounced waits until another process holds the write queue's lock
// file at path.
func waitQueueAnnounced(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if f, err := os.Open(path); err == nil {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			}
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return
			}
		}
		time.Sleep(5 * time.Millisecond) // polling another process's lock: no event to wait on
	}
	t.Fatalf("no process took the write queue %s in 10s", path)
}

// waitStopped waits until process pid is stopped (state T in /proc): a
// signal is delivered after kill returns.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...: the state follows the last ')'.
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		time.Sleep(time.Millisecond) // polling another process's state: no event to wait on
	}
	t.Fatalf("process %d not stopped 10s after SIGSTOP", pid)
}
