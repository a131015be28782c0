package httpapi

import "testing"

// TestNotUTF8 reads raw JSON values as encoding/json would and says what
// would not come through as it was sent; escapes that stand for UTF-8 text
// (a surrogate pair, an escaped backslash before "u") pass.
func TestNotUTF8(t *testing.T) {
	for _, c := range []struct{ v, want string }{
		{`"42"`, ""},
		{`"\ud83d\ude00"`, ""},             // a pair: one character, U+1F600
		{`"a\\udfff"`, ""},                 // a backslash, then the text udfff
		{`"\\\ud83d\ude00\\"`, ""},         // pairs between escaped backslashes
		{`"\ufffd"`, ""},                   // U+FFFD sent as such is text
		{`{"a": ["\u00e9", 1, null]}`, ""}, // a payload's strings
		{"\"\xff\"", "bytes that are not UTF-8"},
		{`"\udfff"`, `a lone UTF-16 surrogate escape (\udfff)`},
		{`"\ud83d"`, "a lone UTF-16 surrogate escape (a high one not followed by a low one)"},
		{`"\ud83dx"`, "a lone UTF-16 surrogate escape (a high one not followed by a low one)"},
		{`"\ud83d\n"`, "a lone UTF-16 surrogate escape (a high one not followed by a low one)"},
		{`"\ud83d\u0041"`, "a lone UTF-16 surrogate escape (a high one not followed by a low one)"},
		{`"\ud83d\ud83d\ude00"`, `a lone UTF-16 surrogate escape (before \ud83d)`},
		{`{"a": {"b": "\uDC00"}}`, `a lone UTF-16 surrogate escape (\udc00)`},
	} {
		if got := notUTF8([]byte(c.v)); got != c.want {
			t.Errorf("notUTF8(%s) = %q, want %q", c.v, got, c.want)
		}
	}
}
