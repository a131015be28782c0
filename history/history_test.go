package history

import (
	"testing"
	"time"
)

func TestParseOutcome(t *testing.T) {
	for _, o := range Outcomes {
		if got, err := ParseOutcome(string(o)); err != nil || got != o {
			t.Errorf("ParseOutcome(%q) = %q, %v", o, got, err)
		}
	}
	if _, err := ParseOutcome("finished"); err == nil {
		t.Error("ParseOutcome(finished) = nil error, want one listing the outcomes")
	}
}

func TestFilterValidate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		f    Filter
		ok   bool
	}{
		{"empty", Filter{}, true},
		{"entity and key", Filter{Entity: "order", Key: "42"}, true},
		{"key without entity", Filter{Key: "42"}, false},
		{"bad outcome", Filter{Outcomes: []Outcome{"nope"}}, false},
		{"inverted range", Filter{Since: t0, Until: t0}, false},
		{"negative limit", Filter{Limit: -1}, false},
		{"huge limit", Filter{Limit: LimitMax + 1}, false},
	}
	for _, tt := range tests {
		if err := tt.f.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	if got := (Filter{}).EffectiveLimit(); got != LimitDefault {
		t.Errorf("EffectiveLimit() = %d, want %d", got, LimitDefault)
	}
}
