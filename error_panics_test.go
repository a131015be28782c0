package prescient_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
)

// panickyErr is an error type whose Error dereferences its receiver: a check
// that returns a nil *panickyErr as its error (the classic typed-nil
// mistake) returns a non-nil error whose Error method panics.
type panickyErr struct{ msg string }

func (e *panickyErr) Error() string { return e.msg }

func typedNilError(context.Context, *checks.Job) (time.Time, error) {
	var e *panickyErr // a function declared to return *panickyErr, say
	return time.Time{}, e
}

// The engine recovers a check's panics and counts them as failures. A
// check's error value is the check's code too: calling its Error method
// must not be able to take the whole server down. Run in a child process,
// since the panic happens on a group's goroutine and kills the process.
func TestCheckErrorWhoseErrorMethodPanics(t *testing.T) {
	if os.Getenv("PRESCIENT_TEST_CHILD") == "1" {
		h := openSQLite(t)
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", typedNilError, nil), nil)
		schedule(t, c, "1", "c", "2026-03-10T10:15:00Z")
		clk.Set("2026-03-10T10:15:00Z")
		c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
		// Either a failure, or the job left pending: anything but a crash.
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckErrorWhoseErrorMethodPanics$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PRESCIENT_TEST_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil || strings.Contains(out.String(), "panic:") {
		s := out.String()
		if i := strings.Index(s, "panic:"); i >= 0 {
			s = s[i:]
		}
		if len(s) > 1500 {
			s = s[:1500]
		}
		t.Fatalf("firing a slot whose check returned a typed-nil error crashed the process (%v):\n%s", err, s)
	}
}
