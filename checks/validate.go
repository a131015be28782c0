package checks

import (
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"
)

// KeyMax is the longest entity key accepted, in bytes.
const KeyMax = 512

// PayloadMax is the largest payload, in bytes of JSON, a job may carry. The
// payload is a hint for the check (an amount, a locale), not a data store.
const PayloadMax = 64 << 10

// PayloadDepthMax is how deeply arrays and objects may nest in a payload:
// `{"a": [1]}` nests 2 deep, a scalar 0. A deeper document is refused before
// a store sees it: each store has a limit of its own (SQLite's json_valid
// 1000 levels, PostgreSQL's parser its stack depth, Go's decoder 10000), and
// a payload is a hint for a check, which needs nothing that deep.
const PayloadDepthMax = 64

// nameMax is the longest name: 100 characters of a valid name's ASCII, and
// as many bytes of any string refused for its length.
const nameMax = 100

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$`)

// nameRule says what a name may be, in every error about one.
const nameRule = "use 1 to 100 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"

// ValidateName reports whether s may name a check, an entity, an event or a
// server: 1 to 100 characters of ASCII letters, digits, '_', '.', ':' and
// '-', not starting with punctuation other than '_'. what ("check",
// "entity", …) names the kind in the error. A name holding a character
// forbidden in keys (see ValidateKey) is refused with a message naming that
// character instead of quoting the name, so that the message itself carries
// no control or invisible character, and one longer than 100 bytes with its
// length; the messages read the same from PostgreSQL's
// prescient_validate_name.
func ValidateName(what, s string) error {
	if nameRE.MatchString(s) {
		return nil
	}
	if r, pos, kind := forbiddenRune(s); kind != "" {
		return fmt.Errorf("invalid %s name: %U, %s, at character %d: %s", what, r, kind, pos, nameRule)
	}
	if len(s) > nameMax {
		// Not quoted: a name of a megabyte made an error of a megabyte.
		return fmt.Errorf("invalid %s name: %d bytes, more than %d: %s", what, len(s), nameMax, nameRule)
	}
	return fmt.Errorf("invalid %s name %q: %s", what, s, nameRule)
}

// keyRule says what a key may be, in every error about one.
var keyRule = fmt.Sprintf("a key is 1 to %d bytes of UTF-8 text without control characters, bidirectional controls, "+
	"line or paragraph separators or zero-width characters", KeyMax)

// ValidateKey reports whether key may be the key of an entity: 1 to KeyMax
// bytes of UTF-8 text without the characters that would garble a table or
// a terminal it is printed to, or make two keys that look alike differ:
//
//   - control characters, U+0000–U+001F and U+007F–U+009F (newline, tab,
//     escape, the C1 controls);
//   - bidirectional controls, U+061C, U+200E, U+200F, U+202A–U+202E and
//     U+2066–U+2069, which reorder the text around them;
//   - line and paragraph separators, U+2028 and U+2029;
//   - zero-width characters, U+200B, U+2060 and U+FEFF.
//
// The list is fixed (it does not follow Unicode's categories as they grow),
// so that PostgreSQL's prescient_validate_key refuses exactly the same keys
// with the same message. entity, already valid, names the entity in the
// error.
func ValidateKey(entity, key string) error {
	if key == "" || len(key) > KeyMax {
		return fmt.Errorf("entity %s: key must be 1 to %d bytes, got %d", entity, KeyMax, len(key))
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("entity %s: key %q is not UTF-8: %s", entity, key, keyRule)
	}
	if r, pos, kind := forbiddenRune(key); kind != "" {
		return fmt.Errorf("entity %s: key has %U, %s, at character %d: %s", entity, r, kind, pos, keyRule)
	}
	return nil
}

// forbiddenRune returns the first character of s that no name or key may
// hold, its position in characters counting from 1, and what kind of
// character it is; kind is "" when s holds none. PostgreSQL's
// prescient_validate_name and prescient_validate_key hold the same list.
func forbiddenRune(s string) (r rune, pos int, kind string) {
	for _, r := range s {
		pos++
		switch {
		case r <= 0x1f || 0x7f <= r && r <= 0x9f:
			return r, pos, "a control character"
		case r == 0x061c || r == 0x200e || r == 0x200f || 0x202a <= r && r <= 0x202e || 0x2066 <= r && r <= 0x2069:
			return r, pos, "a bidirectional control"
		case r == 0x2028 || r == 0x2029:
			return r, pos, "a line or paragraph separator"
		case r == 0x200b || r == 0x2060 || r == 0xfeff:
			return r, pos, "a zero-width character"
		}
	}
	return 0, 0, ""
}

// ValidatePayload reports whether b may be a job's payload, so that every
// store keeps the same payloads and refuses the others with the same error
// before any is called: b must be valid JSON of at most PayloadMax bytes,
// in UTF-8, nesting arrays and objects at most PayloadDepthMax deep, and
// without the escapes PostgreSQL's jsonb cannot store: \u0000, and a \u
// escape of half a surrogate pair without its other half.
func ValidatePayload(b []byte) error {
	if len(b) > PayloadMax {
		return fmt.Errorf("payload is %d bytes, more than the %d allowed", len(b), PayloadMax)
	}
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return fmt.Errorf("payload is not UTF-8: byte %#x at offset %d; JSON text must be UTF-8", b[off], off)
	}
	deep, bad := scanPayload(b)
	if deep {
		return fmt.Errorf("payload nests arrays and objects more than %d levels deep", PayloadDepthMax)
	}
	if !json.Valid(b) {
		// Unmarshal says where and why, which Valid does not.
		err := json.Unmarshal(b, new(json.RawMessage))
		return fmt.Errorf("payload is not valid JSON: %v", err)
	}
	if bad >= 0 {
		esc := string(b[bad : bad+6])
		if esc == `\u0000` {
			return fmt.Errorf(`payload holds %s at offset %d: PostgreSQL cannot store the NUL character in JSON, so no payload may hold it`, esc, bad)
		}
		return fmt.Errorf(`payload holds %s at offset %d, half of a surrogate pair without its other half: a \u escape must name a whole character`, esc, bad)
	}
	return nil
}

// scanPayload walks JSON text once, without recursing, and reports whether
// arrays and objects nest deeper than PayloadDepthMax (it stops there), and
// the offset of the first string escape that is \u0000 or half a surrogate
// pair alone (bad is -1 when there is none). It assumes nothing of b: on
// text that is not JSON its answers are only as good as the text.
func scanPayload(b []byte) (deep bool, bad int) {
	bad = -1
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			switch c {
			case '"':
				inString = true
			case '{', '[':
				if depth++; depth > PayloadDepthMax {
					return true, bad
				}
			case '}', ']':
				depth--
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			u, ok := uEscape(b, i)
			if !ok {
				i++ // the escaped character, which may be '"' or '\\'
				continue
			}
			if 0xd800 <= u && u < 0xdc00 {
				if lo, ok := uEscape(b, i+6); ok && 0xdc00 <= lo && lo < 0xe000 {
					i += 11 // a whole pair
					continue
				}
			}
			if (u == 0 || 0xd800 <= u && u < 0xe000) && bad < 0 {
				bad = i
			}
			i += 5
		}
	}
	return false, bad
}

// uEscape returns the value of the \uXXXX escape at b[i:i+6], if there is one.
func uEscape(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var v rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
