package slots

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestGridFarFromTheEpoch(t *testing.T) {
	q := Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}
	odd := Grid{Resolution: 7500 * time.Millisecond, Offset: 1500 * time.Millisecond}
	tests := []struct {
		name              string
		g                 Grid
		in                string
		ceil, floor, next string
	}{
		{"the start of the range", q, "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "1970-01-01T00:15:00Z"},
		{"just inside the end of the range", q, "2199-12-31T23:50:00.000000001Z", "2200-01-01T00:00:00Z", "2199-12-31T23:45:00Z", "2200-01-01T00:00:00Z"},
		{"the end of the range", q, "2200-01-01T00:00:00Z", "2200-01-01T00:00:00Z", "2200-01-01T00:00:00Z", "2200-01-01T00:15:00Z"},
		// A Duration from the epoch overflows on 2262-04-11; the grid does not.
		{"where a Duration from the epoch ends", q, "2262-04-11T23:47:16.854775807Z", "2262-04-12T00:00:00Z", "2262-04-11T23:45:00Z", "2262-04-12T00:00:00Z"},
		{"past where a Duration from the epoch ends", q, "2262-04-11T23:47:16.854775808Z", "2262-04-12T00:00:00Z", "2262-04-11T23:45:00Z", "2262-04-12T00:00:00Z"},
		{"year 9999", q, "9999-12-31T23:40:00.5Z", "9999-12-31T23:45:00Z", "9999-12-31T23:30:00Z", "9999-12-31T23:45:00Z"},
		{"before a Duration before the epoch begins", q, "1677-09-21T00:12:43.145224191Z", "1677-09-21T00:15:00Z", "1677-09-21T00:00:00Z", "1677-09-21T00:15:00Z"},
		{"year 1", q, "0001-01-01T00:00:00.5Z", "0001-01-01T00:15:00Z", "0001-01-01T00:00:00Z", "0001-01-01T00:15:00Z"},
		// 2200-01-01 (7,258,118,400 s after the epoch) is a boundary of
		// 7.5 s slots; the offset moves every boundary 1.5 s later.
		{"an odd grid near the end", odd, "2199-12-31T23:59:59Z", "2200-01-01T00:00:01.5Z", "2199-12-31T23:59:54Z", "2200-01-01T00:00:01.5Z"},
		{"an odd grid on a boundary near the end", odd, "2200-01-01T00:00:01.5Z", "2200-01-01T00:00:01.5Z", "2200-01-01T00:00:01.5Z", "2200-01-01T00:00:09Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := at(tt.in)
			if got := tt.g.Ceil(in); !got.Equal(at(tt.ceil)) || got.Location() != time.UTC {
				t.Errorf("Ceil(%s) = %s, want %s in UTC", tt.in, got.Format(time.RFC3339Nano), tt.ceil)
			}
			if got := tt.g.Floor(in); !got.Equal(at(tt.floor)) {
				t.Errorf("Floor(%s) = %s, want %s", tt.in, got.Format(time.RFC3339Nano), tt.floor)
			}
			if got := tt.g.Next(in); !got.Equal(at(tt.next)) {
				t.Errorf("Next(%s) = %s, want %s", tt.in, got.Format(time.RFC3339Nano), tt.next)
			}
			floor := at(tt.floor)
			if !tt.g.IsBoundary(floor) {
				t.Errorf("IsBoundary(%s) = false, want true", tt.floor)
			}
			if got := tt.g.Add(floor, 1); !got.Equal(at(tt.next)) {
				t.Errorf("Add(%s, 1) = %s, want %s", tt.floor, got.Format(time.RFC3339Nano), tt.next)
			}
			if got := tt.g.Add(at(tt.next), -1); !got.Equal(floor) {
				t.Errorf("Add(%s, -1) = %s, want %s", tt.next, got.Format(time.RFC3339Nano), tt.floor)
			}
		})
	}
}

func TestGridAddManySlots(t *testing.T) {
	g := Grid{Resolution: time.Hour}
	// 300 years of hours: more than a Duration holds.
	from := at("1970-01-01T00:00:00Z")
	n := 300 * 365 * 24
	want := from.Add(time.Duration(n/2) * time.Hour).Add(time.Duration(n-n/2) * time.Hour)
	if got := g.Add(from, n); !got.Equal(want) {
		t.Errorf("Add(%s, %d) = %s, want %s", from, n, got, want)
	}
}

func TestCheckTime(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"1970-01-01T00:00:00Z", true},
		{"2026-03-10T10:05:00Z", true},
		{"2199-12-31T23:59:59.999999999Z", true},
		{"1969-12-31T23:59:59.999999999Z", false},
		{"0001-01-01T00:00:00Z", false},
		{"2200-01-01T00:00:00Z", false},
		{"2200-01-01T02:00:00+02:00", false},
		{"2262-04-12T00:00:00Z", false},
		{"9999-12-31T23:59:59Z", false},
	}
	for _, tt := range tests {
		err := CheckTime(at(tt.in))
		if (err == nil) != tt.ok {
			t.Errorf("CheckTime(%s) = %v, want ok=%v", tt.in, err, tt.ok)
		}
		if InRange(at(tt.in)) != tt.ok {
			t.Errorf("InRange(%s) = %v, want %v", tt.in, !tt.ok, tt.ok)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrOutOfRange) {
			t.Errorf("CheckTime(%s) = %v, which does not wrap ErrOutOfRange", tt.in, err)
		}
		for _, want := range []string{"1970-01-01T00:00:00Z", "2200-01-01T00:00:00Z"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("CheckTime(%s) = %q, want it to name the range (%s)", tt.in, err, want)
			}
		}
	}
}
