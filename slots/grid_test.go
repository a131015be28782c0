package slots

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestGridCeilFloorNext(t *testing.T) {
	q := Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}
	off := Grid{Resolution: 15 * time.Minute, Offset: 5 * time.Minute, Cycle: time.Hour}
	tests := []struct {
		name              string
		g                 Grid
		in                string
		ceil, floor, next string
	}{
		{"between slots", q, "2026-03-10T10:05:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z"},
		{"exact boundary stays", q, "2026-03-10T10:15:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z"},
		{"one nanosecond past", q, "2026-03-10T10:15:00.000000001Z", "2026-03-10T10:30:00Z", "2026-03-10T10:15:00Z", "2026-03-10T10:30:00Z"},
		{"one nanosecond before", q, "2026-03-10T10:14:59.999999999Z", "2026-03-10T10:15:00Z", "2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z"},
		{"across midnight", q, "2026-12-31T23:50:00Z", "2027-01-01T00:00:00Z", "2026-12-31T23:45:00Z", "2027-01-01T00:00:00Z"},
		{"the article's 10:05 + 3h", q, "2026-03-10T13:05:00Z", "2026-03-10T13:15:00Z", "2026-03-10T13:00:00Z", "2026-03-10T13:15:00Z"},
		{"non-UTC zone gives UTC", q, "2026-03-10T12:05:00+02:00", "2026-03-10T10:15:00Z", "2026-03-10T10:00:00Z", "2026-03-10T10:15:00Z"},
		{"offset between", off, "2026-03-10T10:06:00Z", "2026-03-10T10:20:00Z", "2026-03-10T10:05:00Z", "2026-03-10T10:20:00Z"},
		{"offset boundary", off, "2026-03-10T10:05:00Z", "2026-03-10T10:05:00Z", "2026-03-10T10:05:00Z", "2026-03-10T10:20:00Z"},
		{"offset before first of hour", off, "2026-03-10T10:01:00Z", "2026-03-10T10:05:00Z", "2026-03-10T09:50:00Z", "2026-03-10T10:05:00Z"},
		{"before the epoch", q, "1969-12-31T23:50:00Z", "1970-01-01T00:00:00Z", "1969-12-31T23:45:00Z", "1970-01-01T00:00:00Z"},
		{"seconds grid", Grid{Resolution: 2 * time.Second}, "2026-03-10T10:00:01.5Z", "2026-03-10T10:00:02Z", "2026-03-10T10:00:00Z", "2026-03-10T10:00:02Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := at(tt.in)
			if got := tt.g.Ceil(in); !got.Equal(at(tt.ceil)) || got.Location() != time.UTC {
				t.Errorf("Ceil(%s) = %s, want %s in UTC", tt.in, got, tt.ceil)
			}
			if got := tt.g.Floor(in); !got.Equal(at(tt.floor)) {
				t.Errorf("Floor(%s) = %s, want %s", tt.in, got, tt.floor)
			}
			if got := tt.g.Next(in); !got.Equal(at(tt.next)) {
				t.Errorf("Next(%s) = %s, want %s", tt.in, got, tt.next)
			}
		})
	}
}

func TestGridPositions(t *testing.T) {
	q := Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}
	off := Grid{Resolution: 15 * time.Minute, Offset: 5 * time.Minute, Cycle: time.Hour}
	tests := []struct {
		g    Grid
		in   string
		want int
	}{
		{q, "2026-03-10T10:00:00Z", 0},
		{q, "2026-03-10T10:15:00Z", 1},
		{q, "2026-03-10T10:30:00Z", 2},
		{q, "2026-03-10T10:45:00Z", 3},
		{q, "2026-03-10T10:59:59Z", 3},
		{q, "2026-03-10T11:00:00Z", 0},
		{q, "1969-12-31T23:45:00Z", 3},
		{off, "2026-03-10T10:05:00Z", 0},
		{off, "2026-03-10T10:04:59Z", 3},
		{Grid{Resolution: time.Minute}, "2026-03-10T10:07:00Z", 0},
	}
	for _, tt := range tests {
		if got := tt.g.Position(at(tt.in)); got != tt.want {
			t.Errorf("%s: Position(%s) = %d, want %d", tt.g, tt.in, got, tt.want)
		}
	}
	if got := q.Positions(); got != 4 {
		t.Errorf("Positions() = %d, want 4", got)
	}
	if got := (Grid{Resolution: time.Minute}).Positions(); got != 1 {
		t.Errorf("Positions() without a cycle = %d, want 1", got)
	}
}

func TestGridValidate(t *testing.T) {
	tests := []struct {
		name string
		g    Grid
		ok   bool
	}{
		{"quarter hours", Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}, true},
		{"no cycle", Grid{Resolution: time.Second}, true},
		{"zero resolution", Grid{}, false},
		{"negative resolution", Grid{Resolution: -time.Minute}, false},
		{"sub-millisecond resolution", Grid{Resolution: 1500 * time.Microsecond}, false},
		{"offset equal to resolution", Grid{Resolution: time.Minute, Offset: time.Minute}, false},
		{"negative offset", Grid{Resolution: time.Minute, Offset: -time.Second}, false},
		{"cycle not a multiple", Grid{Resolution: 7 * time.Minute, Cycle: time.Hour}, false},
		{"negative cycle", Grid{Resolution: time.Minute, Cycle: -time.Hour}, false},
		{"a day of one-second slots", Grid{Resolution: time.Second, Cycle: 24 * time.Hour}, true},
		// 86,400,000 positions took a minute and gigabytes to check.
		{"a day of one-millisecond slots", Grid{Resolution: time.Millisecond, Cycle: 24 * time.Hour}, false},
		{"one position too many", Grid{Resolution: time.Millisecond, Cycle: (MaxPositions + 1) * time.Millisecond}, false},
	}
	for _, tt := range tests {
		err := tt.g.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidGrid) {
			t.Errorf("%s: error %v does not wrap ErrInvalidGrid", tt.name, err)
		}
	}
}

func TestGridIsASchedule(t *testing.T) {
	var s Schedule = Grid{Resolution: time.Second}
	from := at("2026-03-10T10:00:00.3Z")
	if got, want := s.Next(from), at("2026-03-10T10:00:01Z"); !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got, want)
	}
}

func FuzzCeil(f *testing.F) {
	f.Add(int64(0), int64(1000))
	f.Add(int64(-1), int64(15*60*1000))
	f.Fuzz(func(t *testing.T, ns int64, resMs int64) {
		if resMs <= 0 || resMs > 1e9 {
			return
		}
		g := Grid{Resolution: time.Duration(resMs) * time.Millisecond}
		in := time.Unix(0, ns/4) // keep well within Duration range of the epoch
		c := g.Ceil(in)
		if c.Before(in) || c.Sub(in) >= g.Resolution || !g.IsBoundary(c) {
			t.Fatalf("Ceil(%s) = %s with resolution %s", in, c, g.Resolution)
		}
	})
}

func TestGridJSON(t *testing.T) {
	b, err := json.Marshal(Grid{Resolution: 15 * time.Minute, Offset: time.Minute, Cycle: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"resolution":"15m0s","offset":"1m0s","cycle":"1h0m0s","positions":4}`; string(b) != want {
		t.Errorf("JSON = %s, want %s", b, want)
	}
	var back Grid
	if err := json.Unmarshal(b, &back); err != nil || back != (Grid{Resolution: 15 * time.Minute, Offset: time.Minute, Cycle: time.Hour}) {
		t.Errorf("round trip = %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"resolution":"soon"}`), &back); err == nil {
		t.Error("a bad duration decoded without error")
	}
}
