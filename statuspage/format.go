package statuspage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/history"
)

// funcs are the templates' helpers. Each returns plain text (or a URL
// string), which html/template escapes for where it lands.
var funcs = template.FuncMap{
	"clock":   clock,
	"day":     func(t time.Time) string { return t.UTC().Format("Mon 2 Jan") },
	"stamp":   stamp,
	"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"dur":     dur,
	"num":     num,
	"pretty":  pretty,
	"tone":    tone,
	"jobURL":  jobURL,
	"histURL": histURL,
	"join":    strings.Join,
	"sameDay": func(a, b time.Time) bool { return a.UTC().Format(time.DateOnly) == b.UTC().Format(time.DateOnly) },
	"since":   func(now, t time.Time) time.Duration { return now.Sub(t) },
	"until":   func(now, t time.Time) time.Duration { return t.Sub(now) },
}

// clock is the time of day of t in UTC, with milliseconds when it has them.
func clock(t time.Time) string {
	t = t.UTC()
	if t.Nanosecond() != 0 {
		return t.Format("15:04:05.000")
	}
	return t.Format(time.TimeOnly)
}

// stamp is t in UTC to the second, date included; "never" for the zero time.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// dur writes d for people: "850µs", "12ms", "1.25s", "3m5s", "2h0m0s".
func dur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d == 0:
		s = "0s"
	case d < time.Millisecond:
		s = d.Round(time.Microsecond).String()
	case d < 10*time.Millisecond:
		s = strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
	case d < time.Second:
		s = d.Round(time.Millisecond).String()
	case d%time.Second == 0:
		s = d.String()
	case d < time.Minute:
		s = strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	default:
		s = d.Round(time.Second).String()
	}
	if neg {
		return "-" + s
	}
	return s
}

// num writes n with thousands separators: 1,000,000.
func num(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// pretty indents a JSON payload; one that does not parse is shown as it is.
func pretty(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// tone is the stylesheet's class for an outcome: good, quiet, warn or bad.
func tone(o history.Outcome) string {
	switch o {
	case history.Done, history.Resolved:
		return "good"
	case history.Cancelled:
		return "quiet"
	case history.Failed:
		return "bad"
	}
	return "warn"
}

// jobURL is the relative link to one job's page; check may be empty for
// every check of the entity key.
func jobURL(entity, key, check string) string {
	v := url.Values{"entity": {entity}, "key": {key}}
	if check != "" {
		v.Set("check", check)
	}
	return "job?" + v.Encode()
}

// histURL is the relative link to history filtered by the name/value pairs
// given.
func histURL(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return "history"
	}
	return "history?" + v.Encode()
}

// ranges writes positions as runs: "0–3, 7, 9–11".
func ranges(ps []int) string {
	ps = slices.Sorted(slices.Values(ps))
	ps = slices.Compact(ps)
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		for j+1 < len(ps) && ps[j+1] == ps[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ps[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d–%d", ps[i], ps[j]))
		}
		i = j + 1
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
