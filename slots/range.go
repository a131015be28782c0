package slots

import (
	"errors"
	"fmt"
	"time"
)

// MinTime is the start of the range of check times prescient supports: the
// Unix epoch, 1970-01-01T00:00:00Z. Every check time scheduled (and the slot
// it rounds up to) lies in [MinTime, MaxTime).
var MinTime = time.Date(1970, time.January, 1, 0, 0, 0, 0, time.UTC)

// MaxTime is the end, excluded, of the range of check times prescient
// supports: 2200-01-01T00:00:00Z. The engine subtracts check times from each
// other as time.Durations (lateness, the horizon), which span only 292 years,
// and every store, JSON and RFC 3339 represent times up to it exactly. A
// stored time at or after MaxTime can only have been written by an older
// version; the client reads it back as MaxTime, which no valid check time
// equals.
var MaxTime = time.Date(2200, time.January, 1, 0, 0, 0, 0, time.UTC)

// ErrOutOfRange is wrapped by the errors about a time outside [MinTime,
// MaxTime).
var ErrOutOfRange = errors.New("outside the supported range")

// InRange reports whether t lies in [MinTime, MaxTime).
func InRange(t time.Time) bool {
	return !t.Before(MinTime) && t.Before(MaxTime)
}

// CheckTime returns nil when t lies in [MinTime, MaxTime), and otherwise an
// error wrapping ErrOutOfRange that names t and the range.
func CheckTime(t time.Time) error {
	if InRange(t) {
		return nil
	}
	return fmt.Errorf("time %s is %w %s", t.Format(time.RFC3339Nano), ErrOutOfRange, Range())
}

// Range describes the supported range for messages:
// "[1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)".
func Range() string {
	return fmt.Sprintf("[%s, %s)", MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
}

// Clamp returns t, or MaxTime when t is at or after MaxTime. The client reads
// every check time a store returns through it: a time beyond the range can
// only have been stored by an older version (which let year 9999 through,
// rounded up into year 10000), and JSON cannot even encode a year after 9999.
// MaxTime itself is never a valid check time, so a clamped time stays
// recognisable. Times before MinTime, and the zero time (which means "none"),
// are returned as they are.
func Clamp(t time.Time) time.Time {
	if t.Before(MaxTime) {
		return t
	}
	return MaxTime
}
