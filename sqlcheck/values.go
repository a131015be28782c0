package sqlcheck

import (
	sqldriver "database/sql/driver"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prescient-dev/prescient/slots"
)

// keyText returns a key column's value as the key it names: text as it is,
// a number as its decimal text; false for NULL.
func keyText(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case []byte:
		return string(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	case int32:
		return strconv.FormatInt(int64(x), 10), true
	case int16:
		return strconv.FormatInt(int64(x), 10), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case [16]byte:
		return uuidText(x), true
	case json.RawMessage:
		// A json or jsonb key, as ->> prints it: a string's text, any
		// other value as written (12345678901234567, 1.50).
		var s string
		if json.Unmarshal(x, &s) == nil {
			return s, true
		}
		if string(x) == "null" {
			return "", false
		}
		return string(x), true
	case netip.Prefix:
		if x.IsSingleIP() {
			return x.Addr().String(), true // inet 10.0.0.1, as PostgreSQL prints it
		}
		return x.String(), true
	case sqldriver.Valuer:
		// A numeric (pgtype.Numeric) as PostgreSQL prints it, 1001.
		if dv, err := x.Value(); err == nil {
			if _, again := dv.(sqldriver.Valuer); !again {
				return keyText(dv)
			}
		}
	}
	if s, ok := v.(fmt.Stringer); ok {
		return s.String(), true
	}
	return fmt.Sprint(v), true
}

func uuidText(u [16]byte) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// timeLayouts are the text forms of a time an SQLite column may hold: the
// Go driver's, SQLite's own (datetime()), and RFC 3339; without a zone,
// UTC.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02T15:04",
	"2006-01-02",
}

// goTimeText matches the text Go's time.Time.String writes (which
// modernc.org/sqlite stores for a time.Time by default), with its
// monotonic clock reading, if any, cut off.
var goTimeText = regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [+-]\d{4} \S+)(?: m=[+-]\d+\.\d+)?$`)

// Numbers an anchor may be: below julianMax a Julian day (SQLite's
// julianday(); as seconds it would fall before 1970-04-27), from
// millisMin milliseconds since 1970 (as seconds, after the year 5000),
// seconds since 1970 between.
const (
	julianMax  = 1e7
	millisMin  = 1e11
	julianUnix = 2440587.5 // the Julian day of 1970-01-01T00:00:00Z
)

// anchorTime reads an anchor column's value as a time: a timestamp or date,
// text in one of timeLayouts or Go's own, or a number (see julianMax).
func anchorTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, errors.New("is NULL")
	case time.Time:
		return x, nil
	case int64:
		// As a number of the same value: its range is checked there (an
		// integer 8000000000, the year 2223, or -100 was read as it was).
		return anchorTime(float64(x))
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return time.Time{}, fmt.Errorf("is %v, not a time", x)
		}
		secs := x
		switch {
		case x > 0 && x < julianMax:
			// A double holds a Julian day to about 20µs, and SQLite
			// computes it to the millisecond: round to that.
			secs = math.Round((x-julianUnix)*86400*1000) / 1000
		case x >= millisMin:
			secs = x / 1000
		}
		if secs < float64(slots.MinTime.Unix()) || secs >= float64(slots.MaxTime.Unix()) {
			return time.Time{}, fmt.Errorf("is %v, outside the supported range as a number: a Julian day (below %g), seconds since 1970, "+
				"or milliseconds since 1970 (from %g)", x, float64(julianMax), float64(millisMin))
		}
		sec, frac := math.Modf(secs)
		return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3).UTC(), nil
	case []byte:
		return anchorTime(string(x))
	case string:
		s := strings.TrimSpace(x)
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return t, nil
			}
		}
		if m := goTimeText.FindStringSubmatch(s); m != nil {
			if t, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", m[1]); err == nil {
				return t, nil
			}
		}
		return time.Time{}, fmt.Errorf("%q is not a time (write it as 2006-01-02 15:04:05, RFC 3339, seconds or milliseconds since 1970, or a Julian day)", x)
	}
	return time.Time{}, fmt.Errorf("is a %T, not a time", v)
}

// jsonValue encodes a column's value for the events' payload: numbers,
// text, booleans and JSON as themselves, times as RFC 3339 text in UTC,
// bytes as text (base64 when they are not UTF-8), a UUID as its text, NULL
// as null; anything else as its JSON, or its text.
func jsonValue(v any) []byte {
	switch x := v.(type) {
	case nil:
		return []byte("null")
	case time.Time:
		b, _ := json.Marshal(x.UTC().Format(time.RFC3339Nano))
		return b
	case []byte:
		s := string(x)
		if !utf8.Valid(x) {
			s = base64.StdEncoding.EncodeToString(x)
		}
		b, _ := json.Marshal(s)
		return b
	case [16]byte:
		b, _ := json.Marshal(uuidText(x))
		return b
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			b, _ := json.Marshal(strconv.FormatFloat(x, 'g', -1, 64))
			return b
		}
	case json.Marshaler:
		if b, err := x.MarshalJSON(); err == nil && json.Valid(b) {
			return b
		}
	case sqldriver.Valuer:
		if dv, err := x.Value(); err == nil {
			return jsonValue(dv)
		}
	}
	if b, err := json.Marshal(v); err == nil {
		return b
	}
	b, _ := json.Marshal(fmt.Sprint(v))
	return b
}

// wallTime reads t's wall clock (a timestamp without time zone, which pgx
// returns as if in UTC) in loc as PostgreSQL does: a time a change of
// offset makes ambiguous (the hour repeated when clocks go back) takes the
// offset in force after the change, and one it skips (the hour lost when
// they go forward) the offset in force before it, standard time in both
// cases (Go's time.Date may pick the other).
func wallTime(t time.Time, loc *time.Location) time.Time {
	wall := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	// The offsets a day either side of the moment itself (near it within
	// a day): around the wall clock read as UTC, zones at UTC+12 and beyond
	// would look past a change made a few hours before; and a change can
	// skip a whole day (Pacific/Apia on 2011-12-30, -10 to +14), which 12
	// hours either side did not reach past.
	near := time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), loc)
	_, before := near.Add(-24 * time.Hour).Zone()
	_, after := near.Add(24 * time.Hour).Zone()
	early := wall.Add(-time.Duration(before) * time.Second)
	late := wall.Add(-time.Duration(after) * time.Second)
	reads := func(c time.Time) bool {
		l := c.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC).Equal(wall)
	}
	if reads(late) {
		return late.In(loc) // the only reading, or the later offset's of two
	}
	return early.In(loc) // the only reading, or in the gap: the offset before it
}
