package slots

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Schedule yields the next activation time strictly after a given time. The
// engine hands a Grid to robfig/cron through this interface (cron.Schedule has
// the same method set), so this package does not import cron.
type Schedule interface {
	Next(time.Time) time.Time
}

// ResolutionDefault is the slot resolution used when none is configured.
const ResolutionDefault = 15 * time.Minute

// CycleDefault is the ownership cycle used when none is configured: with the
// default resolution it gives four positions (minutes 00, 15, 30, 45).
const CycleDefault = time.Hour

// Grid is the fixed time grid of slots: boundaries at Offset + k*Resolution
// after the Unix epoch, for every integer k. Positions number the slots within
// an ownership cycle of length Cycle, so that slot k has position k mod
// (Cycle/Resolution).
//
// A Grid must be validated before use; its methods assume a valid grid.
type Grid struct {
	// Resolution is the distance between two slots. It must be positive and a
	// whole number of milliseconds (the stores keep microseconds, and a coarser
	// unit keeps every boundary representable in both).
	Resolution time.Duration
	// Offset shifts every boundary from the epoch grid. 0 <= Offset < Resolution.
	Offset time.Duration
	// Cycle is the length of the ownership cycle. Zero means one slot (a single
	// position). Otherwise it must be a positive multiple of Resolution.
	Cycle time.Duration
}

// MaxPositions is the most positions a cycle may hold: one-second slots over
// a day are 86,400. Ownership is checked and shown position by position, and
// a cycle of millions (a day of one-millisecond slots) took a minute and
// gigabytes to check, then an error listing them all.
const MaxPositions = 100_000

// ErrInvalidGrid is wrapped by every error Validate returns.
var ErrInvalidGrid = errors.New("invalid slot grid")

// Validate reports the first setting that makes the grid unusable, naming it.
func (g Grid) Validate() error {
	switch {
	case g.Resolution <= 0:
		return fmt.Errorf("%w: resolution %s must be positive", ErrInvalidGrid, g.Resolution)
	case g.Resolution%time.Millisecond != 0:
		return fmt.Errorf("%w: resolution %s must be a whole number of milliseconds", ErrInvalidGrid, g.Resolution)
	case g.Offset < 0 || g.Offset >= g.Resolution:
		return fmt.Errorf("%w: offset %s must be at least 0 and less than the resolution %s", ErrInvalidGrid, g.Offset, g.Resolution)
	case g.Offset%time.Millisecond != 0:
		return fmt.Errorf("%w: offset %s must be a whole number of milliseconds", ErrInvalidGrid, g.Offset)
	case g.Cycle < 0:
		return fmt.Errorf("%w: cycle %s must not be negative", ErrInvalidGrid, g.Cycle)
	case g.Cycle != 0 && g.Cycle%g.Resolution != 0:
		return fmt.Errorf("%w: cycle %s is not a multiple of the resolution %s", ErrInvalidGrid, g.Cycle, g.Resolution)
	case g.Cycle/g.Resolution > MaxPositions:
		return fmt.Errorf("%w: cycle %s holds %d slots of %s, more than %d positions (a longer resolution or a shorter cycle)",
			ErrInvalidGrid, g.Cycle, g.Cycle/g.Resolution, g.Resolution, MaxPositions)
	}
	return nil
}

// index returns the number of the slot that contains t (the k of the boundary
// at or before t) and how far past that boundary t lies.
//
// It counts whole milliseconds from the epoch in an int64 (Resolution and
// Offset are whole milliseconds), never a Duration: time.Time.Sub saturates
// 292 years from the epoch, which once put a check asked for in year 9999
// into the next slot. It is exact for any time within 292 million years of
// the epoch.
func (g Grid) index(t time.Time) (k int64, rem time.Duration) {
	ns := int64(t.Nanosecond()) // 0 <= ns < 1e9, whatever the sign of t.Unix()
	ms := t.Unix()*1000 + ns/1e6 - g.Offset.Milliseconds()
	res := g.Resolution.Milliseconds()
	k, r := ms/res, ms%res
	if r < 0 {
		k--
		r += res
	}
	return k, time.Duration(r)*time.Millisecond + time.Duration(ns%1e6)
}

// boundary returns the time of slot number k.
func (g Grid) boundary(k int64) time.Time {
	return time.UnixMilli(k*g.Resolution.Milliseconds() + g.Offset.Milliseconds()).UTC()
}

// Floor returns the slot boundary at or before t, in UTC.
func (g Grid) Floor(t time.Time) time.Time {
	k, _ := g.index(t)
	return g.boundary(k)
}

// Ceil rounds t up to the grid: the slot boundary at or after t, in UTC. A time
// exactly on a boundary stays where it is. This is the rounding applied to
// every stored check time: "not before t, within one slot".
func (g Grid) Ceil(t time.Time) time.Time {
	k, rem := g.index(t)
	if rem > 0 {
		k++
	}
	return g.boundary(k)
}

// Next returns the first slot boundary strictly after t, in UTC. It makes a
// Grid a Schedule (and a robfig/cron Schedule) that ticks at every slot.
func (g Grid) Next(t time.Time) time.Time {
	k, _ := g.index(t)
	return g.boundary(k + 1)
}

// Add returns the slot n slots after slot (n may be negative). slot should
// be a boundary; any other time moves by n resolutions too.
func (g Grid) Add(slot time.Time, n int) time.Time {
	k, rem := g.index(slot)
	return g.boundary(k + int64(n)).Add(rem)
}

// IsBoundary reports whether t lies exactly on a slot boundary.
func (g Grid) IsBoundary(t time.Time) bool {
	_, rem := g.index(t)
	return rem == 0
}

// Positions returns the number of positions in the ownership cycle (at least 1).
func (g Grid) Positions() int {
	if g.Cycle == 0 {
		return 1
	}
	return int(g.Cycle / g.Resolution)
}

// Position returns the position, within the ownership cycle, of the slot that
// contains t: 0 <= Position(t) < Positions().
func (g Grid) Position(t time.Time) int {
	k, _ := g.index(t)
	n := int64(g.Positions())
	p := k % n
	if p < 0 {
		p += n
	}
	return int(p)
}

// String describes the grid for logs and the CLI.
func (g Grid) String() string {
	s := fmt.Sprintf("every %s", g.Resolution)
	if g.Offset != 0 {
		s += fmt.Sprintf(" offset %s", g.Offset)
	}
	return s + fmt.Sprintf(", %d position(s) per %s cycle", g.Positions(), g.cycle())
}

func (g Grid) cycle() time.Duration {
	if g.Cycle == 0 {
		return g.Resolution
	}
	return g.Cycle
}

// MarshalJSON writes the grid for scripts: durations as Go duration strings
// and the number of positions, e.g.
// {"resolution":"15m0s","offset":"0s","cycle":"1h0m0s","positions":4}.
func (g Grid) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Resolution string `json:"resolution"`
		Offset     string `json:"offset"`
		Cycle      string `json:"cycle"`
		Positions  int    `json:"positions"`
	}{g.Resolution.String(), g.Offset.String(), g.cycle().String(), g.Positions()})
}

// UnmarshalJSON reads the form MarshalJSON writes (positions is derived and
// ignored). It does not validate the grid.
func (g *Grid) UnmarshalJSON(b []byte) error {
	var v struct {
		Resolution, Offset, Cycle string
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	var out Grid
	for _, f := range []struct {
		name string
		s    string
		dst  *time.Duration
	}{{"resolution", v.Resolution, &out.Resolution}, {"offset", v.Offset, &out.Offset}, {"cycle", v.Cycle, &out.Cycle}} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return fmt.Errorf("grid %s: %w", f.name, err)
		}
		*f.dst = d
	}
	// MarshalJSON writes a zero cycle as one resolution; both mean one position.
	if out.Cycle == out.Resolution {
		out.Cycle = 0
	}
	*g = out
	return nil
}
