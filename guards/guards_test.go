package guards

import (
	"testing"
	"time"

	"github.com/prescient-dev/prescient/history"
)

func TestJudge(t *testing.T) {
	slot := time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	l := Limits{MaxChecks: 3, Runtime: time.Second, Horizon: 24 * time.Hour}
	tests := []struct {
		name   string
		l      Limits
		checks int
		next   time.Time
		want   history.Outcome
	}{
		{"fine", l, 1, slot.Add(3 * time.Hour), ""},
		{"exactly the horizon", l, 1, slot.Add(24 * time.Hour), ""},
		{"beyond the horizon", l, 1, slot.Add(24*time.Hour + time.Second), history.GuardHorizon},
		{"same slot", l, 1, slot, history.GuardPast},
		{"before the slot", l, 1, slot.Add(-time.Minute), history.GuardPast},
		{"last allowed check asks again", l, 3, slot.Add(time.Hour), history.GuardMaxChecks},
		{"second of three asks again", l, 2, slot.Add(time.Hour), ""},
		{"past wins over max checks", l, 3, slot, history.GuardPast},
		{"no horizon", Limits{MaxChecks: 3, Horizon: -1}, 1, slot.Add(1000 * time.Hour), ""},
		{"no max checks", Limits{MaxChecks: -1, Horizon: -1}, 1e6, slot.Add(time.Hour), ""},
	}
	for _, tt := range tests {
		v := tt.l.Judge(tt.checks, slot, slot, tt.next)
		if v.Outcome != tt.want {
			t.Errorf("%s: Judge(%d, %s) = %q (%s), want %q", tt.name, tt.checks, tt.next, v.Outcome, v.Reason, tt.want)
		}
		if !v.OK() && v.Reason == "" {
			t.Errorf("%s: verdict %q has no reason", tt.name, v.Outcome)
		}
	}
}

func TestLimitsDefaultsOverrideValidate(t *testing.T) {
	d := Limits{}.WithDefaults()
	if d.MaxChecks != MaxChecksDefault || d.Runtime != RuntimeDefault || d.Horizon != HorizonDefault {
		t.Errorf("WithDefaults = %+v", d)
	}
	o := d.Override(Limits{Runtime: time.Second})
	if o.Runtime != time.Second || o.MaxChecks != MaxChecksDefault {
		t.Errorf("Override = %+v, want runtime 1s and default max checks", o)
	}
	for _, bad := range []Limits{{MaxChecks: -2}, {Runtime: -time.Second}, {Horizon: -2}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", bad)
		}
	}
}

// TestJudgeLateCheck: a check that ran later than its slot (in a catch-up)
// has the horizon counted from its start: asking for an hour after it is
// fine a day late, as on time; further than the horizon from it is not.
func TestJudgeLateCheck(t *testing.T) {
	slot := time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	l := Limits{MaxChecks: 3, Horizon: 12 * time.Hour}
	ran := slot.Add(24 * time.Hour)
	if v := l.Judge(1, slot, ran, ran.Add(time.Hour)); !v.OK() {
		t.Errorf("a day late, asking for an hour after its start: %q (%s), want fine", v.Outcome, v.Reason)
	}
	if v := l.Judge(1, slot, ran, ran.Add(12*time.Hour+time.Second)); v.Outcome != history.GuardHorizon {
		t.Errorf("a day late, asking for 12h1s after its start: %q, want guard_horizon", v.Outcome)
	}
	if v := l.Judge(1, slot, ran, slot); v.Outcome != history.GuardPast {
		t.Errorf("a day late, asking for its own slot: %q, want guard_past", v.Outcome)
	}
}

// TestJudgeReasonsKeepFractions: on a grid of less than a second the
// reasons printed both times to the second, so a next check half a second
// before its slot read "next check 10:00:00Z is not after the slot
// 10:00:00Z" (found by a trial of time).
func TestJudgeReasonsKeepFractions(t *testing.T) {
	slot := time.Date(2026, 3, 10, 10, 0, 0, 500_000_000, time.UTC)
	v := Limits{MaxChecks: 3, Horizon: time.Second}.Judge(1, slot, slot, slot.Add(-250*time.Millisecond))
	if want := "next check 2026-03-10T10:00:00.25Z is not after the slot 2026-03-10T10:00:00.5Z"; v.Reason != want {
		t.Errorf("reason %q, want %q", v.Reason, want)
	}
	v = Limits{MaxChecks: 3, Horizon: time.Second}.Judge(1, slot, slot.Add(100*time.Millisecond), slot.Add(1500*time.Millisecond))
	if want := "next check 2026-03-10T10:00:02Z is 1.4s after the check's start (its slot was 2026-03-10T10:00:00.5Z), beyond the horizon 1s"; v.Reason != want {
		t.Errorf("reason %q, want %q", v.Reason, want)
	}
}
