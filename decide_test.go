package prescient

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// t0 is a slot on every grid of these tests.
var t0 = time.Date(2030, time.June, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestDecide(t *testing.T) {
	p := policy{grid: slots.Grid{Resolution: 15 * time.Minute}, maxFailures: 3, backoffMax: time.Hour}
	limits := guards.Limits{MaxChecks: 5, Runtime: time.Second, Horizon: 24 * time.Hour}
	boom := errors.New("boom")
	tests := []struct {
		name  string
		job   checks.Job // ID 7, due in Slot, running at Now
		res   checks.Result
		limit *guards.Limits
		want  driver.Decision // ID and Lateness are filled in
	}{
		{"no next time: done",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{},
			nil, driver.Decision{Outcome: history.Done, Checked: true}},
		{"a next time, rounded up to the grid",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(3*time.Hour + time.Nanosecond)},
			nil, driver.Decision{Next: at(3*time.Hour + 15*time.Minute), Checked: true}},
		{"a next time on a boundary stays",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(45 * time.Minute)},
			nil, driver.Decision{Next: at(45 * time.Minute), Checked: true}},
		{"a next time passed while the check ran late lands in the first slot after now",
			checks.Job{Slot: t0, Now: at(50 * time.Minute)}, checks.Result{Next: at(30 * time.Minute)},
			nil, driver.Decision{Next: at(time.Hour), Checked: true}},
		{"a next time not after the slot: guard_past",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(-time.Minute)},
			nil, driver.Decision{Outcome: history.GuardPast, Checked: true,
				Reason: "next check 2030-06-01T11:59:00Z is not after the slot 2030-06-01T12:00:00Z"}},
		{"beyond the horizon: guard_horizon",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(25 * time.Hour)},
			nil, driver.Decision{Outcome: history.GuardHorizon, Checked: true,
				Reason: "next check 2030-06-02T13:00:00Z is 24h59m59s after the check's start (its slot was 2030-06-01T12:00:00Z), beyond the horizon 24h0m0s"}},
		{"further than the horizon as asked: guard_horizon",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(24*time.Hour + 0)},
			&guards.Limits{MaxChecks: 5, Runtime: time.Second, Horizon: 23*time.Hour + 50*time.Minute},
			driver.Decision{Outcome: history.GuardHorizon, Checked: true,
				Reason: "next check 2030-06-02T12:00:00Z is 23h59m59s after the check's start (its slot was 2030-06-01T12:00:00Z), beyond the horizon 23h50m0s"}},
		{"a check run a day late (a catch-up) counts the horizon from its start",
			checks.Job{Slot: t0, Now: at(30 * time.Hour)}, checks.Result{Next: at(31 * time.Hour)},
			nil, driver.Decision{Next: at(31 * time.Hour), Checked: true}},
		{"a check run late asking further than the horizon from its start: guard_horizon",
			checks.Job{Slot: t0, Now: at(30 * time.Hour)}, checks.Result{Next: at(54*time.Hour + time.Minute)},
			nil, driver.Decision{Outcome: history.GuardHorizon, Checked: true,
				Reason: "next check 2030-06-03T18:01:00Z is 24h1m0s after the check's start (its slot was 2030-06-01T12:00:00Z), beyond the horizon 24h0m0s"}},
		{"the horizon itself, asked off the grid, rounds up past it and stays",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(20 * time.Minute)},
			&guards.Limits{MaxChecks: 5, Runtime: time.Second, Horizon: 20 * time.Minute},
			driver.Decision{Next: at(30 * time.Minute), Checked: true}},
		{"an error with an empty message still counts as a failure",
			checks.Job{Slot: t0, Now: at(20 * time.Second)}, checks.Result{Err: errors.New("")},
			nil, driver.Decision{Next: at(15 * time.Minute), Err: "the check returned an error (*errors.errorString) with an empty message"}},
		{"an error's NUL and invalid UTF-8, which PostgreSQL refuses, are replaced",
			checks.Job{Slot: t0, Now: at(20 * time.Second)}, checks.Result{Err: errors.New("a\x00b\xffc")},
			nil, driver.Decision{Next: at(15 * time.Minute), Err: "a\uFFFDb\uFFFDc"}},
		{"no horizon: any time ahead",
			checks.Job{Slot: t0, Now: at(time.Second)}, checks.Result{Next: at(1000 * time.Hour)},
			&guards.Limits{MaxChecks: 5, Runtime: time.Second, Horizon: -1}, driver.Decision{Next: at(1000 * time.Hour), Checked: true}},
		{"the last check asks for another: guard_max_checks",
			checks.Job{Slot: t0, Now: at(time.Second), CheckCount: 4}, checks.Result{Next: at(time.Hour)},
			nil, driver.Decision{Outcome: history.GuardMaxChecks, Checked: true, Reason: "asked for check 6, more than max_checks 5"}},
		{"the last check allowed may finish",
			checks.Job{Slot: t0, Now: at(time.Second), CheckCount: 4}, checks.Result{},
			nil, driver.Decision{Outcome: history.Done, Checked: true}},
		{"a first failure retries one slot after the slot",
			checks.Job{Slot: t0, Now: at(20 * time.Second)}, checks.Result{Err: boom},
			nil, driver.Decision{Next: at(15 * time.Minute), Err: "boom"}},
		{"a second failure retries two slots after the slot",
			checks.Job{Slot: t0, Now: at(20 * time.Second), FailureCount: 1}, checks.Result{Err: boom},
			nil, driver.Decision{Next: at(30 * time.Minute), Err: "boom"}},
		{"a failure marked permanent: failed at once",
			checks.Job{Slot: t0, Now: at(20 * time.Second)}, checks.Result{Err: fmt.Errorf("lookup: %w", checks.Permanent(boom))},
			nil, driver.Decision{Outcome: history.Failed, Err: "lookup: boom (not retried: the check marked its failure permanent)"}},
		{"the max_failures-th failure in a row: failed",
			checks.Job{Slot: t0, Now: at(20 * time.Second), FailureCount: 2}, checks.Result{Err: boom},
			nil, driver.Decision{Outcome: history.Failed, Err: "boom"}},
		{"a success after failures clears them (the store does, on Checked)",
			checks.Job{Slot: t0, Now: at(time.Second), FailureCount: 2}, checks.Result{},
			nil, driver.Decision{Outcome: history.Done, Checked: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limits
			if tt.limit != nil {
				l = *tt.limit
			}
			j := tt.job
			j.ID = 7
			want := tt.want
			want.ID, want.Lateness = 7, j.Now.Sub(j.Slot)
			if got := p.decide(l, &j, tt.res); !reflect.DeepEqual(got, want) {
				t.Errorf("decide:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestDecideOutsideTheSupportedRange: a check asking for a time the engine
// cannot represent (at or after slots.MaxTime) ends guard_horizon, horizon or
// not, and says why; it once overflowed into 1677 and ended guard_past.
func TestDecideOutsideTheSupportedRange(t *testing.T) {
	p := policy{grid: slots.Grid{Resolution: 15 * time.Minute}, maxFailures: 3, backoffMax: time.Hour}
	horizon := guards.Limits{MaxChecks: 5, Runtime: time.Second, Horizon: 24 * time.Hour}
	unlimited := guards.Limits{MaxChecks: -1, Runtime: time.Second, Horizon: -1}
	year9999 := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	const rng = "[1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)"
	tests := []struct {
		name   string
		limits guards.Limits
		next   time.Time
		want   driver.Decision // ID, Lateness and Checked are filled in
	}{
		{"year 9999 beyond the horizon", horizon, year9999,
			driver.Decision{Outcome: history.GuardHorizon, Reason: "next check 9999-12-31T23:59:59Z is beyond the supported range " + rng}},
		{"year 9999 without a horizon", unlimited, year9999,
			driver.Decision{Outcome: history.GuardHorizon, Reason: "next check 9999-12-31T23:59:59Z is beyond the supported range " + rng}},
		{"where a Duration from the epoch overflows", unlimited, time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC),
			driver.Decision{Outcome: history.GuardHorizon, Reason: "next check 2262-04-12T00:00:00Z is beyond the supported range " + rng}},
		{"the end of the range", unlimited, slots.MaxTime,
			driver.Decision{Outcome: history.GuardHorizon, Reason: "next check 2200-01-01T00:00:00Z is beyond the supported range " + rng}},
		{"a time rounding up to the end of the range", unlimited, time.Date(2199, 12, 31, 23, 50, 0, 0, time.UTC),
			driver.Decision{Outcome: history.GuardHorizon,
				Reason: "next check 2199-12-31T23:50:00Z rounds up to 2200-01-01T00:00:00Z, beyond the supported range " + rng}},
		{"the last slot of the range", unlimited, time.Date(2199, 12, 31, 23, 40, 0, 0, time.UTC),
			driver.Decision{Next: time.Date(2199, 12, 31, 23, 45, 0, 0, time.UTC)}},
		{"before a Duration from the epoch begins: the past", unlimited, time.Date(1601, 1, 1, 0, 0, 0, 0, time.UTC),
			driver.Decision{Outcome: history.GuardPast, Reason: "next check 1601-01-01T00:00:00Z is not after the slot 2030-06-01T12:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := checks.Job{ID: 7, Slot: t0, Now: at(time.Second)}
			want := tt.want
			want.ID, want.Lateness, want.Checked = 7, time.Second, true
			if got := p.decide(tt.limits, &j, checks.Result{Next: tt.next}); !reflect.DeepEqual(got, want) {
				t.Errorf("decide:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestRetrySlot(t *testing.T) {
	grid2s := slots.Grid{Resolution: 2 * time.Second}
	tests := []struct {
		name       string
		grid       slots.Grid
		backoffMax time.Duration
		slot, now  time.Time
		failures   int
		want       time.Time
	}{
		// 1, 2, 4, … slots after the slot the job failed in, wherever in
		// the slot the failure fell.
		{"first failure, early in the slot", grid2s, time.Hour, t0, at(100 * time.Millisecond), 1, at(2 * time.Second)},
		{"first failure, late in the slot", grid2s, time.Hour, t0, at(1900 * time.Millisecond), 1, at(2 * time.Second)},
		{"second failure", grid2s, time.Hour, t0, at(time.Second), 2, at(4 * time.Second)},
		{"third failure", grid2s, time.Hour, t0, at(time.Second), 3, at(8 * time.Second)},
		{"fourth failure", grid2s, time.Hour, t0, at(time.Second), 4, at(16 * time.Second)},
		{"capped by backoff_max", grid2s, 5 * time.Second, t0, at(time.Second), 9, at(6 * time.Second)},
		{"never less than one slot", grid2s, time.Second, t0, at(time.Second), 3, at(2 * time.Second)},
		{"a check run late retries in the next slot", grid2s, time.Hour, t0, at(7 * time.Second), 2, at(8 * time.Second)},
		{"a check run late, on a boundary, retries in the slot after", grid2s, time.Hour, t0, at(8 * time.Second), 1, at(10 * time.Second)},
		{"15-minute slots", slots.Grid{Resolution: 15 * time.Minute}, time.Hour, t0, at(3 * time.Minute), 3, at(time.Hour)},
		{"an offset grid", slots.Grid{Resolution: 10 * time.Second, Offset: 3 * time.Second},
			time.Hour, at(3 * time.Second), at(4 * time.Second), 2, at(23 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy{grid: tt.grid, maxFailures: 100, backoffMax: tt.backoffMax}
			if got := p.retrySlot(tt.slot, tt.now, tt.failures); !got.Equal(tt.want) {
				t.Errorf("retrySlot(slot +%s, now +%s, %d failures) = +%s, want +%s",
					tt.slot.Sub(t0), tt.now.Sub(t0), tt.failures, got.Sub(t0), tt.want.Sub(t0))
			}
		})
	}
}

func TestTickWindow(t *testing.T) {
	g := slots.Grid{Resolution: time.Minute}
	tests := []struct {
		name          string
		now, lastGood time.Time
		lookBack      time.Duration
		from, cur     time.Time
	}{
		{"first tick: only the slot in progress", at(30 * time.Second), time.Time{}, 0, t0, t0},
		{"a tick after the previous slot fired", at(time.Minute), t0, 0, at(time.Minute), at(time.Minute)},
		{"ticks missed: back to the last good slot", at(5*time.Minute + time.Second), t0, 0, at(time.Minute), at(5 * time.Minute)},
		{"a late tick in the same slot fires it again", at(5*time.Minute + 40*time.Second), at(5 * time.Minute), 0, at(6 * time.Minute), at(5 * time.Minute)},
		{"automatic ownership looks back the server timeout and a slot",
			at(10 * time.Minute), at(9 * time.Minute), 3 * time.Minute, at(6 * time.Minute), at(10 * time.Minute)},
		{"the look-back does not push the window forward",
			at(10 * time.Minute), at(2 * time.Minute), 3 * time.Minute, at(3 * time.Minute), at(10 * time.Minute)},
		{"never more than catchupMax slots", at(5000 * time.Minute), at(time.Minute), 0,
			at((5000 - catchupMax + 1) * time.Minute), at(5000 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, cur := tickWindow(g, tt.now, tt.lastGood, tt.lookBack)
			if !from.Equal(tt.from) || !cur.Equal(tt.cur) {
				t.Errorf("tickWindow(now +%s, last good +%s, look back %s) = +%s..+%s, want +%s..+%s",
					tt.now.Sub(t0), tt.lastGood.Sub(t0), tt.lookBack, from.Sub(t0), cur.Sub(t0), tt.from.Sub(t0), tt.cur.Sub(t0))
			}
		})
	}
}

func TestPlan(t *testing.T) {
	// plan only asks whether a check is a batch check, and its batch size.
	noBatch := func(context.Context, []*checks.Job) ([]checks.Result, error) { return nil, nil }
	single := &checks.Check{Name: "single"}
	batch := &checks.Check{Name: "batch", Batch: noBatch}
	batchSized := &checks.Check{Name: "sized", Batch: noBatch, Opts: checks.Opts{BatchSize: 2}}
	lookup := func(name string) (*checks.Check, bool) {
		c, ok := map[string]*checks.Check{"single": single, "other": {Name: "other"}, "batch": batch, "sized": batchSized}[name]
		return c, ok
	}
	due := func(names ...string) []*driver.DueJob {
		var ds []*driver.DueJob
		for i, n := range names {
			ds = append(ds, &driver.DueJob{ID: int64(i + 1), Check: n})
		}
		return ds
	}
	type g struct {
		batch string
		ids   []int64
	}
	tests := []struct {
		name                          string
		due                           []*driver.DueJob
		workers, groupSize, batchSize int
		want                          []g
		unknown                       map[string]int
	}{
		{"single-job checks of any names share groups of groupSize",
			due("single", "other", "single", "other", "single"), 1, 2, 10,
			[]g{{"", []int64{1, 2}}, {"", []int64{3, 4}}, {"", []int64{5}}}, map[string]int{}},
		{"a small page is spread over the workers",
			due("single", "single", "single", "single", "single"), 3, 50, 10,
			[]g{{"", []int64{1, 2}}, {"", []int64{3, 4}}, {"", []int64{5}}}, map[string]int{}},
		{"more workers than jobs: one job a group",
			due("single", "single"), 10, 50, 10,
			[]g{{"", []int64{1}}, {"", []int64{2}}}, map[string]int{}},
		{"a batch check's jobs go in batches of batchSize",
			due("batch", "single", "batch", "batch"), 1, 50, 2,
			[]g{{"", []int64{2}}, {"batch", []int64{1, 3}}, {"batch", []int64{4}}}, map[string]int{}},
		{"a batch check's own batch size wins",
			due("sized", "sized", "sized", "batch"), 1, 50, 10,
			[]g{{"sized", []int64{1, 2}}, {"sized", []int64{3}}, {"batch", []int64{4}}}, map[string]int{}},
		{"unknown checks are counted, not grouped",
			due("typo", "single", "typo", "gone"), 1, 50, 10,
			[]g{{"", []int64{2}}}, map[string]int{"typo": 2, "gone": 1}},
		{"nothing due", nil, 4, 50, 10, nil, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups, unknown := plan(tt.due, lookup, tt.workers, tt.groupSize, tt.batchSize)
			var got []g
			for _, gr := range groups {
				name := ""
				if gr.batch != nil {
					name = gr.batch.Name
				}
				got = append(got, g{name, slices.Clone(gr.ids)})
			}
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(unknown, tt.unknown) {
				t.Errorf("plan:\ngot  %v, unknown %v\nwant %v, unknown %v", fmt.Sprint(got), unknown, fmt.Sprint(tt.want), tt.unknown)
			}
		})
	}
}

func TestJoinFew(t *testing.T) {
	var errs []error
	for i := range 10 {
		errs = append(errs, fmt.Errorf("group %d failed", i))
	}
	if got, want := joinFew(errs[:2]).Error(), "group 0 failed\ngroup 1 failed"; got != want {
		t.Errorf("joinFew of 2 = %q, want %q", got, want)
	}
	if got, want := joinFew(errs).Error(), "group 0 failed\ngroup 1 failed\ngroup 2 failed\nand 7 more like these"; got != want {
		t.Errorf("joinFew of 10 = %q, want %q", got, want)
	}
	if joinFew(nil) != nil {
		t.Error("joinFew of none is not nil")
	}
}
