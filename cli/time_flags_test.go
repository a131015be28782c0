package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTimeFlagsInLowerCase: RFC 3339 allows a lower-case t and z
// (2030-06-01t15:00:00z), which Go's layout refuses; the time flags take
// them (found by a trial of time).
func TestTimeFlagsInLowerCase(t *testing.T) {
	for _, s := range []string{"2030-06-01t15:00:00z", "2030-06-01t17:00:00+02:00", "2030-06-01T15:00:00z"} {
		got, err := parseTimeFlag("--at", s)
		if want := time.Date(2030, 6, 1, 15, 0, 0, 0, time.UTC); err != nil || !got.Equal(want) {
			t.Errorf("parseTimeFlag(%q) = %s, %v; want %s", s, got, err, want)
		}
		got, err = parseWhen("--since", s, time.Now())
		if want := time.Date(2030, 6, 1, 15, 0, 0, 0, time.UTC); err != nil || !got.Equal(want) {
			t.Errorf("parseWhen(%q) = %s, %v; want %s", s, got, err, want)
		}
	}
	// A duration ago past 1970 is as far back as that.
	if got, err := parseWhen("--since", "1000000h", time.Now()); err != nil || !got.Equal(time.Unix(0, 0)) {
		t.Errorf("parseWhen(1000000h) = %s, %v; want 1970-01-01T00:00:00Z", got, err)
	}
}

// TestScheduleAtZeroTimeIsRefused: schedule --at 0001-01-01T00:00:00Z
// scheduled the job for now, and reschedule moved a job due in 2030 into
// the next slot (found by a trial of time).
func TestScheduleAtZeroTimeIsRefused(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+db+"\n")}
	h.mustRun("migrate")
	h.mustRun("schedule", "order", "1", "order_unshipped", "--at", "2030-06-01T15:00:00Z")
	if out, err := h.run("reschedule", "order", "1", "order_unshipped", "--at", "0001-01-01T00:00:00Z"); err == nil {
		t.Errorf("reschedule --at 0001-01-01T00:00:00Z: accepted:\n%s", out)
	}
	wantContains(t, "jobs show", h.mustRun("jobs", "show", "order", "1"), "2030-06-01T15:00:00Z")
}

// TestAfterAtTakesTheRangeEnd: --after-at is the cursor a listing's hint
// gives, and a job an older prescient stored past 2200 is listed at
// 2200-01-01T00:00:00Z, the range's end: the cursor takes it (found by a
// review). And a lower-case time that is no real day says so.
func TestAfterAtTakesTheRangeEnd(t *testing.T) {
	if got, ok, err := parseAfter("2200-01-01T00:00:00Z", 7, "job", "next check"); err != nil || !ok || !got.Equal(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("parseAfter(2200-01-01T00:00:00Z) = %s, %v, %v; want it taken", got, ok, err)
	}
	if _, err := parseTimeFlag("--at", "2030-04-31t00:00:00z"); err == nil || !strings.Contains(err.Error(), "is no real time: day out of range") {
		t.Errorf("--at 2030-04-31t00:00:00z: %v; want \"is no real time: day out of range\"", err)
	}
}

// TestScheduleInPastTheRangeOpensNothing: schedule --in 2000000h (past
// 2200) was refused by the store, after the command had opened the
// database, creating a SQLite file that did not exist (found by a trial of
// time): it is refused with the flags now.
func TestScheduleInPastTheRangeOpensNothing(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database:\n  path: "+db+"\n")}
	for _, args := range [][]string{
		{"schedule", "order", "1", "order_unshipped", "--in", "2000000h"},
		{"reschedule", "order", "1", "order_unshipped", "--in", "2000000h"},
	} {
		out, err := h.run(args...)
		if err == nil || !strings.Contains(err.Error(), `--in "2000000h" reaches `) || !strings.Contains(err.Error(), "past the supported range") {
			t.Errorf("%s: %v\n%s; want it refused past the supported range", strings.Join(args, " "), err, out)
		}
	}
	if _, err := os.Stat(db); !os.IsNotExist(err) {
		t.Errorf("the database file was made for a refused command: %v", err)
	}
}
