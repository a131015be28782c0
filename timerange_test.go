package prescient_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

const supportedRange = "[1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)"

// Check times outside [slots.MinTime, slots.MaxTime) are refused by every way
// of scheduling, saying the range; the CLI's --at and --in go through
// Schedule. They once went through Duration arithmetic that overflowed, and
// year 9999 landed in the next slot.
func TestScheduleRefusesTimesOutsideTheRange(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2030-06-01T12:00:00Z")
		c := h.client(clk, register(t, "unshipped", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil), nil)
		pending := schedule(t, c, "1", "unshipped", "2030-06-01T15:00:00Z")

		bad := map[string]time.Time{
			"year 9999":                 ts("9999-12-31T23:59:59Z"),
			"--in 2562047h":             clk.Now().Add(2562047 * time.Hour),
			"the end of the range":      slots.MaxTime,
			"rounds up to the end":      ts("2199-12-31T23:50:00Z"),
			"before the range":          ts("1969-12-31T23:59:59Z"),
			"long before a Duration":    ts("1601-01-01T00:00:00Z"),
			"the end in another zone":   ts("2200-01-01T01:00:00+01:00"),
			"just past the end, in UTC": slots.MaxTime.Add(time.Nanosecond),
		}
		wantRefused := func(t *testing.T, what string, err error) {
			t.Helper()
			if err == nil {
				t.Fatalf("%s: no error, want one saying the supported range", what)
			}
			if !errors.Is(err, prescient.ErrOutOfRange) || !strings.Contains(err.Error(), supportedRange) {
				t.Errorf("%s: %v, want an error wrapping ErrOutOfRange that says the range %s", what, err, supportedRange)
			}
		}
		for name, at := range bad {
			p := prescient.ScheduleParams{Entity: "order", Key: "2", Check: "unshipped", At: at}
			_, err := c.Schedule(ctx, p)
			wantRefused(t, name+": Schedule", err)
			_, err = c.ScheduleTx(ctx, nil, p)
			wantRefused(t, name+": ScheduleTx", err)
			ok := prescient.ScheduleParams{Entity: "order", Key: "3", Check: "unshipped", At: ts("2030-06-02T00:00:00Z")}
			_, err = c.ScheduleMany(ctx, []prescient.ScheduleParams{ok, p})
			wantRefused(t, name+": ScheduleMany", err)
			if err != nil && !strings.Contains(err.Error(), "#1") {
				t.Errorf("%s: ScheduleMany: %v, want it to name params #1", name, err)
			}
			_, err = c.ScheduleManyTx(ctx, nil, []prescient.ScheduleParams{p})
			wantRefused(t, name+": ScheduleManyTx", err)
			_, err = c.Reschedule(ctx, "order", "1", "unshipped", at)
			wantRefused(t, name+": Reschedule", err)
			_, err = c.RescheduleTx(ctx, nil, "order", "1", "unshipped", at)
			wantRefused(t, name+": RescheduleTx", err)
		}
		if n := h.count("SELECT * FROM prescient_jobs"); n != 1 {
			t.Errorf("%d jobs pending after refusals, want the one scheduled before", n)
		}
		if j, err := c.Job(ctx, "order", "1", "unshipped"); err != nil || !j.NextCheckAt.Equal(pending.NextCheckAt) {
			t.Errorf("job after refused reschedules: %+v, %v; want it still due at %s", j, err, pending.NextCheckAt)
		}

		// The last slot of the range is fine, in a zone or not.
		for _, at := range []time.Time{ts("2199-12-31T23:45:00Z"), ts("2200-01-01T00:44:59+01:00")} {
			j, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "4", Check: "unshipped", At: at})
			if err != nil || !j.NextCheckAt.Equal(ts("2199-12-31T23:45:00Z")) {
				t.Errorf("schedule at %s: %+v, %v; want the slot 2199-12-31T23:45:00Z", at, j, err)
			}
		}
		if j, err := c.Reschedule(ctx, "order", "1", "unshipped", ts("2199-12-31T23:30:00.5Z")); err != nil || !j.NextCheckAt.Equal(ts("2199-12-31T23:45:00Z")) {
			t.Errorf("reschedule into the last slot: %+v, %v", j, err)
		}
	})
}

// A check asking for a time beyond the supported range ends guard_horizon,
// with or without a horizon, saying the range; it once overflowed into 1677
// and ended guard_past.
func TestCheckAskingBeyondTheRangeEndsGuardHorizon(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		clk := newClock("2030-06-01T12:00:00Z")
		far := func(context.Context, *checks.Job) (time.Time, error) { return ts("9999-12-31T23:59:59Z"), nil }
		reg := register(t, "far", far, nil)
		if err := reg.Register("far_unlimited", far, &checks.Opts{Guards: guards.Limits{Horizon: -1}}); err != nil {
			t.Fatal(err)
		}
		c := h.client(clk, reg, nil)
		schedule(t, c, "1", "far", "2030-06-01T12:15:00Z")
		schedule(t, c, "2", "far_unlimited", "2030-06-01T12:15:00Z")
		clk.Set("2030-06-01T12:15:00Z")
		fire(t, c, "2030-06-01T12:15:00Z")
		for _, key := range []string{"1", "2"} {
			r := wantOutcome(t, c, key, history.GuardHorizon, 1)
			if !strings.Contains(r.LastError, "9999-12-31T23:59:59Z") || !strings.Contains(r.LastError, supportedRange) {
				t.Errorf("order %s: reason %q, want it to name the time and the supported range", key, r.LastError)
			}
		}
	})
}

// A row holding a time beyond the supported range, as an older version's
// prescient_schedule wrote for 9999-12-31T23:59:59Z (rounded up into year
// 10000), must not break the commands that read: it reads as slots.MaxTime,
// which JSON can encode, and status lists its slot as that.
func TestTimesBeyondTheRangeDoNotBreakReads(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2030-06-01T12:00:00Z")
		c := h.client(clk, register(t, "unshipped", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil), nil)
		schedule(t, c, "ok", "unshipped", "2030-06-01T15:00:00Z")
		year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		for _, key := range []string{"legacy-1", "legacy-2", "legacy-3"} {
			at := year10000
			if key == "legacy-3" {
				at = at.Add(time.Hour) // another slot beyond the range
			}
			if h.name == "sqlite" {
				h.exec(`INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
					VALUES ('order', $1, 'unshipped', $2, $2, $3, $3)`, key, at.UnixMicro(), clk.Now().UnixMicro())
			} else {
				h.exec(`INSERT INTO prescient_jobs (entity, entity_key, check_name, first_check_at, next_check_at, created_at, updated_at)
					VALUES ('order', $1, 'unshipped', $2, $2, $3, $3)`, key, at, clk.Now())
			}
		}
		// A legacy job that finished keeps its first check time in history.
		if n, err := c.Cancel(ctx, "order", "legacy-1", "unshipped"); err != nil || n != 1 {
			t.Fatalf("cancel the legacy job: %d, %v", n, err)
		}

		st, err := c.Status(ctx, nil)
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if _, err := json.Marshal(st); err != nil {
			t.Errorf("status as JSON: %v", err)
		}
		if st.Jobs.Pending != 3 {
			t.Errorf("status: %d pending, want 3", st.Jobs.Pending)
		}
		want := []driver.SlotLoad{{Slot: ts("2030-06-01T15:00:00Z"), Jobs: 1}, {Slot: slots.MaxTime, Jobs: 2}}
		if got := st.Jobs.Upcoming; len(got) != len(want) || got[0] != want[0] || !got[1].Slot.Equal(want[1].Slot) || got[1].Jobs != want[1].Jobs {
			t.Errorf("status: upcoming %+v, want %+v (every slot beyond the range read as its end)", got, want)
		}

		recs, err := c.History(ctx, history.Filter{Entity: "order", Key: "legacy-1"})
		if err != nil {
			t.Fatalf("history: %v", err)
		}
		if len(recs) != 1 || !recs[0].FirstCheckAt.Equal(slots.MaxTime) {
			t.Fatalf("history of the legacy job: %+v, want one record first due at the end of the range", recs)
		}
		if _, err := json.Marshal(recs); err != nil {
			t.Errorf("history as JSON: %v", err)
		}

		j, err := c.Job(ctx, "order", "legacy-2", "unshipped")
		if err != nil {
			t.Fatalf("job: %v", err)
		}
		if !j.NextCheckAt.Equal(slots.MaxTime) || !j.FirstCheckAt.Equal(slots.MaxTime) {
			t.Errorf("legacy job reads as first %s, next %s; want both at the end of the range", j.FirstCheckAt, j.NextCheckAt)
		}
		if _, err := json.Marshal(j); err != nil {
			t.Errorf("job as JSON: %v", err)
		}
		// Keeping the legacy job returns it as read; rescheduling it moves it
		// into the range, its first check too since it has never run.
		got, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "legacy-2", Check: "unshipped",
			At: ts("2030-06-02T00:00:00Z"), OnConflict: prescient.ConflictKeep})
		if err != nil || !got.NextCheckAt.Equal(slots.MaxTime) {
			t.Errorf("schedule keeping the legacy job: %+v, %v; want it read as due at the end of the range", got, err)
		}
		if _, err := json.Marshal(got); err != nil {
			t.Errorf("kept job as JSON: %v", err)
		}
		got, err = c.Reschedule(ctx, "order", "legacy-2", "unshipped", ts("2030-06-02T00:00:00Z"))
		if err != nil || !got.NextCheckAt.Equal(ts("2030-06-02T00:00:00Z")) || !got.FirstCheckAt.Equal(ts("2030-06-02T00:00:00Z")) {
			t.Errorf("reschedule the legacy job: %+v, %v", got, err)
		}
	})
}
