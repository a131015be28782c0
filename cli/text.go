package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/prescient-dev/prescient/slots"
)

// writeJSON writes v as the one indented JSON document of a command's
// --json output. The characters safeText escapes are escaped here too (see
// jsonSafe): --json output also reaches terminals.
func writeJSON(out io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := out.Write(jsonSafe(b.Bytes()))
	return err
}

// jsonSafe rewrites the characters encoding/json leaves as they are but a
// terminal acts on (DEL, C1 controls such as CSI, bidirectional and
// zero-width characters; see unsafeRune) as \u escapes, a surrogate pair
// beyond the BMP. The JSON decodes to the same text. encoding/json has
// escaped the C0 controls and U+2028/U+2029 already, and its output outside
// strings is ASCII, so every such character is inside a string.
func jsonSafe(doc []byte) []byte {
	unsafe := func(r rune) bool { return r >= 0x7f && unsafeRune(r) }
	if !bytes.ContainsFunc(doc, unsafe) {
		return doc
	}
	out := make([]byte, 0, len(doc)+32)
	for i := 0; i < len(doc); {
		r, size := utf8.DecodeRune(doc[i:])
		switch {
		case !unsafe(r):
			out = append(out, doc[i:i+size]...)
		case r > 0xffff:
			hi, lo := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, hi, lo)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	return out
}

// safeText makes s, which came from a check (an error message) or from an
// older row, safe to print to a terminal on one line: control characters
// (newline, tab, escape…), bidirectional and zero-width characters, line and
// paragraph separators and invalid UTF-8 are written as Go escapes (\n,
// \x1b, \u202e), so that the text cannot move the cursor, recolour the
// terminal or reorder a line. Text that needs an escape has its backslashes
// doubled too, so that nothing is lost; text that needs none is returned
// as it is.
func safeText(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case unsafeRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// unsafeRune reports the characters safeText escapes: those a key may not
// hold (see checks.ValidateKey), and any other format character.
func unsafeRune(r rune) bool {
	switch {
	case unicode.IsControl(r), // C0, DEL, C1
		unicode.Is(unicode.Cf, r), // bidi controls, zero-width characters, BOM
		r == '\u2028', r == '\u2029':
		return true
	}
	return false
}

// cut shortens s, already made safe, to at most n runes, ending it with "…"
// when it was longer.
func cut(s string, n int) (string, bool) {
	if utf8.RuneCountInString(s) <= n {
		return s, false
	}
	r := []rune(s)
	return string(r[:n-1]) + "…", true
}

// noRealTime says which part of a time written as RFC 3339 says names
// nothing real (2030-02-30: "day out of range"; +25:00), from time.Parse's
// error; "" for any other error.
func noRealTime(err error) string {
	var pe *time.ParseError
	if errors.As(err, &pe) && pe.Message != "" {
		return strings.TrimPrefix(pe.Message, ": ")
	}
	return ""
}

// parseTimeFlag reads a flag's RFC 3339 time, the format schedule --at takes.
// A time outside the supported range (slots.Range) is refused: the zero
// time, 0001-01-01T00:00:00Z, read as no flag at all (schedule --at and
// reschedule --at took it for "now", history --until for no bound).
func parseTimeFlag(flag, s string) (time.Time, error) {
	t, err := parseRFC3339(s)
	if why := noRealTime(err); why != "" {
		return time.Time{}, fmt.Errorf("%s %q is no real time: %s", flag, s, why)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is %w (want e.g. 2030-06-01T15:04:05Z or 2030-06-01T17:04:05+02:00)", flag, s, errNotRFC3339)
	}
	if !slots.InRange(t) {
		return time.Time{}, fmt.Errorf("%s %q is outside the supported range %s", flag, s, slots.Range())
	}
	return t, nil
}

// errNotRFC3339 is parseTimeFlag's error for text that is no RFC 3339 time
// at all (parseWhen then tries it as a duration).
var errNotRFC3339 = errors.New("not an RFC 3339 time")

// parseRFC3339 reads an RFC 3339 time, whose T and Z may be written in
// lower case (RFC 3339, 5.6), which Go's layout does not take.
func parseRFC3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil && strings.ContainsAny(s, "tz") {
		// Its error, too: 2030-04-31t00:00:00z is no real day.
		return time.Parse(time.RFC3339, strings.ToUpper(s))
	}
	return t, err
}

// parseAfter reads --after-at and --after-id, where a page of a listing of
// items (a job, a record) starts: after the last item of the previous page,
// whose id and time (its timeName) the page's hint gave. ok is false when
// neither is given.
func parseAfter(at string, id int64, item, timeName string) (t time.Time, ok bool, err error) {
	switch {
	case at != "" && id < 1:
		return time.Time{}, false, fmt.Errorf("--after-at %q needs --after-id: the id of the last %s of the previous page, as its hint says", at, item)
	case id != 0 && at == "":
		return time.Time{}, false, fmt.Errorf("--after-id %d needs --after-at: the %s of that %s, as the previous page's hint says", id, timeName, item)
	case id < 0:
		return time.Time{}, false, fmt.Errorf("--after-id %d must be a %s id (positive)", id, item)
	case at == "":
		return time.Time{}, false, nil
	}
	// A cursor, not a check time: a job stored past the range (by an older
	// prescient) is listed at its end, 2200-01-01T00:00:00Z, and the hint
	// after it names that.
	if t, err = parseRFC3339(at); err != nil {
		if why := noRealTime(err); why != "" {
			return time.Time{}, false, fmt.Errorf("--after-at %q is no real time: %s", at, why)
		}
		return time.Time{}, false, fmt.Errorf("--after-at %q is not an RFC 3339 time (the previous page's hint gives it)", at)
	}
	return t.UTC(), true, nil
}

// parseAtIn reads the --at TIME and --in DURATION pair that says when to
// check: at most one of them, and one of them when required. It returns the
// time of --at, or the duration of --in.
func parseAtIn(at, in string, required bool) (time.Time, time.Duration, error) {
	switch {
	case at == "" && in == "":
		if required {
			return time.Time{}, 0, fmt.Errorf("say when to check: --at TIME (RFC 3339, e.g. 2030-06-01T15:04:05Z) or --in DURATION (e.g. 3h)")
		}
		return time.Time{}, 0, nil
	case at != "" && in != "":
		return time.Time{}, 0, fmt.Errorf("--at %q and --in %q both say when to check; give only one", at, in)
	case at != "":
		t, err := parseTimeFlag("--at", at)
		return t, 0, err
	}
	d, err := time.ParseDuration(in)
	if err != nil || d < 0 {
		return time.Time{}, 0, fmt.Errorf("--in %q is not a Go duration of 0 or more (want e.g. 90s, 15m or 3h30m)%s", in, durationHint(in))
	}
	// Refused before the database is opened (a SQLite file was created
	// for a time the store then refused); the store judges the time
	// again, from its own now.
	if t := time.Now().Add(d); !slots.InRange(t) {
		return time.Time{}, 0, fmt.Errorf("--in %q reaches %s, past the supported range %s", in, t.UTC().Format(time.RFC3339), slots.Range())
	}
	return time.Time{}, d, nil
}

// untilSignal returns ctx ended by SIGINT, SIGTERM or SIGHUP, for a command
// that makes a throwaway database (bench, demo): interrupted, it still
// removes it, where the signal's default would kill the process and leave
// it behind.
func untilSignal(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// interrupted says that cmd was interrupted by a signal, when it was and
// err is what that caused (a failure to remove the throwaway database is
// joined to it); it returns err otherwise.
func interrupted(ctx context.Context, cmd string, err error) error {
	if err != nil && ctx.Err() != nil {
		return interruptedError{cmd, err}
	}
	return err
}

// interruptedError is "cmd: interrupted by a signal: " and what that caused,
// without the "cmd: " that may begin it, so that cmd is named once.
type interruptedError struct {
	cmd string
	err error
}

func (e interruptedError) Error() string {
	return e.cmd + ": interrupted by a signal: " + strings.TrimPrefix(e.err.Error(), e.cmd+": ")
}

func (e interruptedError) Unwrap() error { return e.err }
