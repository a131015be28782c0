package checks

import (
	"strings"
	"testing"
)

const (
	testNameRule = "use 1 to 100 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"
	testKeyRule  = "a key is 1 to 512 bytes of UTF-8 text without control characters, bidirectional controls, " +
		"line or paragraph separators or zero-width characters"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		want string // the error, "" when valid
	}{
		{"order", ""},
		{"_x", ""},
		{"a.b:c-d_e", ""},
		{strings.Repeat("n", 100), ""},
		{"", `invalid entity name "": ` + testNameRule},
		{"-x", `invalid entity name "-x": ` + testNameRule},
		{"bad name", `invalid entity name "bad name": ` + testNameRule},
		// A name too long is not echoed either: its length is.
		{strings.Repeat("n", 101), "invalid entity name: 101 bytes, more than 100: " + testNameRule},
		{strings.Repeat("ü", 60), "invalid entity name: 120 bytes, more than 100: " + testNameRule},
		{strings.Repeat("x", 1<<20), "invalid entity name: 1048576 bytes, more than 100: " + testNameRule},
		{"ünïcode", `invalid entity name "ünïcode": ` + testNameRule},
		// A name is never echoed with a control or invisible character in it:
		// the message names the character instead.
		{"order\n", "invalid entity name: U+000A, a control character, at character 6: " + testNameRule},
		{"tab\tname", "invalid entity name: U+0009, a control character, at character 4: " + testNameRule},
		{"\x1b[31mred", "invalid entity name: U+001B, a control character, at character 1: " + testNameRule},
		{"csi\u009b31m", "invalid entity name: U+009B, a control character, at character 4: " + testNameRule},
		{"del\x7f", "invalid entity name: U+007F, a control character, at character 4: " + testNameRule},
		{"ü\u202eredro", "invalid entity name: U+202E, a bidirectional control, at character 2: " + testNameRule},
		{"a\u2066b", "invalid entity name: U+2066, a bidirectional control, at character 2: " + testNameRule},
		{"a\u2028b", "invalid entity name: U+2028, a line or paragraph separator, at character 2: " + testNameRule},
		{"\ufeffa", "invalid entity name: U+FEFF, a zero-width character, at character 1: " + testNameRule},
	}
	for _, tt := range tests {
		err := ValidateName("entity", tt.name)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ValidateName(entity, %q)\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key  string
		want string // the error, "" when valid
	}{
		{"42", ""},
		{"a key with spaces", ""},
		{"ünïcode €", ""},
		{"👨\u200d👩\u200d👧", ""}, // ZWJ joins emoji and some scripts: allowed
		{"می\u200cخواهم", ""},   // ZWNJ, needed in Persian: allowed
		{strings.Repeat("k", KeyMax), ""},
		{"", "entity order: key must be 1 to 512 bytes, got 0"},
		{strings.Repeat("k", KeyMax+1), "entity order: key must be 1 to 512 bytes, got 513"},
		{"a\xffb", `entity order: key "a\xffb" is not UTF-8: ` + testKeyRule},
		{"nul\x00", "entity order: key has U+0000, a control character, at character 4: " + testKeyRule},
		{"42\n", "entity order: key has U+000A, a control character, at character 3: " + testKeyRule},
		{"42\r", "entity order: key has U+000D, a control character, at character 3: " + testKeyRule},
		{"a\tb", "entity order: key has U+0009, a control character, at character 2: " + testKeyRule},
		{"\x1b[31mred\x1b[0m", "entity order: key has U+001B, a control character, at character 1: " + testKeyRule},
		{"bell\a", "entity order: key has U+0007, a control character, at character 5: " + testKeyRule},
		{"del\x7f", "entity order: key has U+007F, a control character, at character 4: " + testKeyRule},
		{"€\u0085", "entity order: key has U+0085, a control character, at character 2: " + testKeyRule},
		{"€€\u009f", "entity order: key has U+009F, a control character, at character 3: " + testKeyRule},
		{"a\u061cb", "entity order: key has U+061C, a bidirectional control, at character 2: " + testKeyRule},
		{"a\u200eb", "entity order: key has U+200E, a bidirectional control, at character 2: " + testKeyRule},
		{"a\u200fb", "entity order: key has U+200F, a bidirectional control, at character 2: " + testKeyRule},
		{"a\u202ab", "entity order: key has U+202A, a bidirectional control, at character 2: " + testKeyRule},
		{"invoice\u202egnp.exe", "entity order: key has U+202E, a bidirectional control, at character 8: " + testKeyRule},
		{"a\u2066b", "entity order: key has U+2066, a bidirectional control, at character 2: " + testKeyRule},
		{"a\u2069b", "entity order: key has U+2069, a bidirectional control, at character 2: " + testKeyRule},
		{"a\u2028b", "entity order: key has U+2028, a line or paragraph separator, at character 2: " + testKeyRule},
		{"a\u2029b", "entity order: key has U+2029, a line or paragraph separator, at character 2: " + testKeyRule},
		{"4\u200b2", "entity order: key has U+200B, a zero-width character, at character 2: " + testKeyRule},
		{"4\u20602", "entity order: key has U+2060, a zero-width character, at character 2: " + testKeyRule},
		{"\ufeff42", "entity order: key has U+FEFF, a zero-width character, at character 1: " + testKeyRule},
		// The first forbidden character is the one named.
		{"ok\u202e\n", "entity order: key has U+202E, a bidirectional control, at character 3: " + testKeyRule},
	}
	for _, tt := range tests {
		err := ValidateKey("order", tt.key)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("ValidateKey(order, %q)\n got %q\nwant %q", tt.key, got, tt.want)
		}
	}
}

// nest returns n arrays nested in one another around inner.
func nest(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

// nestObjects returns n objects nested in one another around inner.
func nestObjects(n int, inner string) string {
	return strings.Repeat(`{"a":`, n) + inner + strings.Repeat("}", n)
}

func TestValidatePayload(t *testing.T) {
	const deep = "payload nests arrays and objects more than 64 levels deep"
	tests := []struct {
		name, payload string
		want          string // the error, "" when valid
	}{
		{"object", `{"amount": 42, "tags": ["a", "b"]}`, ""},
		{"scalar", `42`, ""},
		{"null", `null`, ""},
		{"escapes", `{"a": "tab\t quote\" backslash\\ unicode\u00e9 \u0001"}`, ""},
		{"surrogate pair", `"\ud83d\ude00"`, ""},
		{"escaped backslash then u0000", `"\\u0000"`, ""},
		{"NUL written as text", `"NUL"`, ""},
		{"64 arrays", nest(64, "1"), ""},
		{"64 objects", nestObjects(64, "1"), ""},
		{"64 mixed", nest(32, nestObjects(32, "1")), ""},
		{"brackets in strings", nest(64, `"[[[[{{{{"`), ""},
		{"largest", `"` + strings.Repeat("x", PayloadMax-2) + `"`, ""},

		{"too large", `"` + strings.Repeat("x", PayloadMax-1) + `"`, "payload is 65537 bytes, more than the 65536 allowed"},
		{"65 arrays", nest(65, "1"), deep},
		{"65 objects", nestObjects(65, "1"), deep},
		{"65 empty arrays", nest(65, ""), deep},
		{"10000 arrays", nest(10000, ""), deep},
		{"10001 arrays", nest(10001, ""), deep},
		{"NUL in a value", `{"a":"\u0000"}`, `payload holds \u0000 at offset 6: PostgreSQL cannot store the NUL character in JSON, so no payload may hold it`},
		{"NUL in a key", `{"x\u0000":1}`, `payload holds \u0000 at offset 3: PostgreSQL cannot store the NUL character in JSON, so no payload may hold it`},
		{"lone high surrogate", `["\ud800"]`, `payload holds \ud800 at offset 2, half of a surrogate pair without its other half: a \u escape must name a whole character`},
		{"high surrogate then text", `"\uD800x"`, `payload holds \uD800 at offset 1, half of a surrogate pair without its other half: a \u escape must name a whole character`},
		{"lone low surrogate", `"ok \udc00"`, `payload holds \udc00 at offset 4, half of a surrogate pair without its other half: a \u escape must name a whole character`},
		{"two high surrogates", `"\ud83d\ud83d"`, `payload holds \ud83d at offset 1, half of a surrogate pair without its other half: a \u escape must name a whole character`},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "payload is not UTF-8: byte 0xff at offset 6; JSON text must be UTF-8"},
		{"truncated UTF-8", "\"\xe2\x82\"", "payload is not UTF-8: byte 0xe2 at offset 1; JSON text must be UTF-8"},
		{"not JSON", `{amount: 3}`, "payload is not valid JSON: invalid character 'a' looking for beginning of object key string"},
		{"empty", ``, "payload is not valid JSON: unexpected end of JSON input"},
		{"two values", `1 2`, "payload is not valid JSON: invalid character '2' after top-level value"},
		{"raw NUL byte", "\"\x00\"", "payload is not valid JSON: invalid character '\\x00' in string literal"},
	}
	for _, tt := range tests {
		err := ValidatePayload([]byte(tt.payload))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: ValidatePayload\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}
