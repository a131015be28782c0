package prescient_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// Checks that fail in a group running a savepoint per check must have only
// their own writes undone, whatever way their statements fail, and must not
// make the checks after them fail. Found by review; each test failed before
// its fix.

// A check that runs no statement (it decides from its job's fields) after a
// check whose statement failed is done: the transaction is aborted until the
// failed check's ROLLBACK TO runs, which waits for the next statement, and
// that state is not the statement-free check's.
func TestCheckWithoutStatementsAfterAFailedStatement(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "a-fails" {
				if err := writeAlert(ctx, j); err != nil {
					return time.Time{}, err
				}
				return time.Time{}, writeAlert(ctx, j) // the same alert again: a unique violation
			}
			return time.Time{}, nil
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
			oneGroup(cfg)
			cfg.SavepointEveryCheck = true
		})
		schedule(t, c, "a-fails", "c", "2026-03-10T10:15:00Z")
		schedule(t, c, "b-no-statement", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		fire(t, c, "2026-03-10T10:15:00Z")
		wantOutcome(t, c, "b-no-statement", history.Done, 1)
		if j := wantPending(t, c, "a-fails", "c"); j.FailureCount != 1 {
			t.Errorf("a-fails: %d failures, want 1", j.FailureCount)
		}
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Errorf("%d alerts, want none (a-fails's first one undone with it)", n)
		}
	})
}

// A statement the server cannot parse (a column that does not exist) fails
// its check alone, also as the first statement of a check on a connection
// that has not run it before: the savepoint must be in place before the
// statement is parsed. And the check fails as checks fail (its failures
// counted against retry.max_failures), not as a check that never finished.
func TestStatementThatDoesNotParseFailsItsCheckAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "b-bad" {
				_, err := j.Tx.Exec(ctx, `UPDATE orders SET no_such_column = 1`)
				return time.Time{}, err
			}
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
			oneGroup(cfg)
			cfg.SavepointEveryCheck = true
			cfg.MaxFailures = 10
		})
		for _, k := range []string{"a-ok", "b-bad", "c-ok"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err != nil {
			t.Fatalf("fire: %v (one check's mistake failed the group)", err)
		}
		if n := h.count("SELECT * FROM alerts"); n != 2 {
			t.Errorf("%d alerts committed, want 2 (a-ok, c-ok)", n)
		}
		wantOutcome(t, c, "a-ok", history.Done, 1)
		wantOutcome(t, c, "c-ok", history.Done, 1)
		// The bad check again at each retry: a failure each time, never a
		// crash.
		for i := 1; i <= 4; i++ {
			j := wantPending(t, c, "b-bad", "c")
			if j.FailureCount != i || !strings.Contains(j.LastError, "no_such_column") {
				t.Fatalf("b-bad after %d firings: %d failures, last error %q; want %d, the server's error", i, j.FailureCount, j.LastError, i)
			}
			clk.Set(j.NextCheckAt.Format(time.RFC3339))
			if _, err := c.FireSlot(context.Background(), j.NextCheckAt); err != nil {
				t.Fatalf("fire the retry: %v", err)
			}
		}
	})
}

// An argument that cannot be encoded (here a Go type the driver does not
// know; as well a value out of its column's range) fails its check alone,
// also when the statement ran on the connection before with arguments that
// encoded: the batch that would send it after the check's SAVEPOINT is not
// sent (pgx closes the connection when an argument fails to encode after a
// SAVEPOINT was queued in its batch).
func TestArgumentThatDoesNotEncodeFailsItsCheckAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			var stage any = "alert"
			if j.Key == "b-bad" {
				stage = struct{ C chan int }{}
			}
			_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, $2)", j.Key, stage)
			return time.Time{}, err
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
			oneGroup(cfg)
			cfg.SavepointEveryCheck = true
		})
		for _, k := range []string{"a-ok", "b-bad", "c-ok"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err != nil {
			t.Fatalf("fire: %v (one check's argument failed the group)", err)
		}
		if n := h.count("SELECT * FROM alerts"); n != 2 {
			t.Errorf("%d alerts committed, want 2 (a-ok, c-ok)", n)
		}
		wantOutcome(t, c, "a-ok", history.Done, 1)
		wantOutcome(t, c, "c-ok", history.Done, 1)
		if j := wantPending(t, c, "b-bad", "c"); j.FailureCount != 1 {
			t.Errorf("b-bad: %d failures, last error %q; want 1", j.FailureCount, j.LastError)
		}
	})
}

// A check that issues its first statement with a context already ended (one
// of its own, or its guard's just as it ends) gets the context's error; the
// checks before it keep their writes and the checks after it run.
func TestStatementOnAnEndedContextFailsItsCheckAlone(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "b-cancelled" {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				err := writeAlert(cctx, j)
				if !errors.Is(err, context.Canceled) {
					t.Errorf("b-cancelled's statement: %v, want context.Canceled", err)
				}
				return time.Time{}, err
			}
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), func(cfg *prescient.Config) {
			oneGroup(cfg)
			cfg.SavepointEveryCheck = true
		})
		for _, k := range []string{"a-ok", "b-cancelled", "c-ok"} {
			schedule(t, c, k, "c", "2026-03-10T10:15:00Z")
		}
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err != nil {
			t.Fatalf("fire: %v (one check's cancelled statement failed the group)", err)
		}
		if n := h.count("SELECT * FROM alerts"); n != 2 {
			t.Errorf("%d alerts committed, want 2 (a-ok, c-ok)", n)
		}
		wantOutcome(t, c, "a-ok", history.Done, 1)
		wantOutcome(t, c, "c-ok", history.Done, 1)
		if j := wantPending(t, c, "b-cancelled", "c"); j.FailureCount != 1 {
			t.Errorf("b-cancelled: %d failures, want 1", j.FailureCount)
		}
	})
}

// failBegin fails the nth Begin, once.
type failBegin struct {
	driver.Driver
	n, nth int64
}

func (d *failBegin) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	if atomic.AddInt64(&d.n, 1) == d.nth {
		return nil, errors.New("injected: connection refused")
	}
	return d.Driver.Begin(ctx, p)
}

// An optimistic group whose check fails runs again with savepoints; when
// that second transaction cannot even begin, the failure found in the first
// is still recorded (in a transaction of its own), and the slot fails, so
// that the tick takes its jobs again.
func TestFailureKeptWhenTheRerunCannotBegin(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		h.store = wrappedStore{h.store, &failBegin{Driver: h.store.Driver(), nth: 2}}
		clk := newClock("2026-03-10T10:00:00Z")
		check := func(ctx context.Context, j *checks.Job) (time.Time, error) {
			if j.Key == "fails" {
				return time.Time{}, errors.New("lookup failed")
			}
			return time.Time{}, writeAlert(ctx, j)
		}
		c := h.client(clk, register(t, "c", check, nil), oneGroup)
		schedule(t, c, "ok", "c", "2026-03-10T10:15:00Z")
		schedule(t, c, "fails", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Errorf("fire: %v, want the failed begin", err)
		}
		if j := wantPending(t, c, "fails", "c"); j.FailureCount != 1 || j.LastError != "lookup failed" {
			t.Errorf("fails: %d failures, last error %q; want its failure recorded", j.FailureCount, j.LastError)
		}
		wantPending(t, c, "ok", "c") // its write rolled back with the first transaction: it runs again
		if n := h.count("SELECT * FROM alerts"); n != 0 {
			t.Errorf("%d alerts, want none yet", n)
		}
		fire(t, c, "2026-03-10T10:15:00Z")
		wantOutcome(t, c, "ok", history.Done, 1)
	})
}
