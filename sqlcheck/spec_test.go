package sqlcheck

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/guards"
)

func validSpec() Spec {
	return Spec{
		Name:   "order_unshipped_sql",
		Entity: "order",
		Query:  "SELECT id AS key FROM orders WHERE id = ANY($1)",
		Stages: []Stage{
			{After: 3 * time.Hour, Event: "order.unshipped", Severity: "warning"},
			{After: 24 * time.Hour, Event: "order.unshipped.escalated", Severity: "critical"},
		},
		Awaits: []string{"shipped"},
		Sinks:  []string{"ops"},
	}
}

func TestValidate(t *testing.T) {
	if err := (&Spec{}).Validate(); err == nil {
		t.Fatal("the zero Spec is valid")
	}
	s := validSpec()
	if err := s.Validate(); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	tests := []struct {
		name   string
		change func(s *Spec)
		field  string
		msg    string
	}{
		{"bad name", func(s *Spec) { s.Name = "has space" }, "", "invalid check name"},
		{"no entity", func(s *Spec) { s.Entity = "" }, "entity", "is missing"},
		{"bad entity", func(s *Spec) { s.Entity = "a/b" }, "entity", "invalid entity name"},
		{"no query", func(s *Spec) { s.Query = " \n" }, "query", "is missing"},
		{"no $1", func(s *Spec) { s.Query = "SELECT 'zzz' AS key" }, "query", "does not use $1"},
		{"anchor is the key", func(s *Spec) { s.Anchor = "key" }, "anchor", "cannot be the key column"},
		{"no stages", func(s *Spec) { s.Stages = nil }, "stages", "at least one stage"},
		{"negative after", func(s *Spec) { s.Stages[0].After = -time.Minute }, "stages[0].after", "is negative"},
		{"same after", func(s *Spec) { s.Stages[1].After = 3 * time.Hour }, "stages[1].after", "strictly increasing"},
		{"decreasing after", func(s *Spec) { s.Stages[1].After = time.Hour }, "stages[1].after", "is not after the stage before it (3h0m0s)"},
		{"no event", func(s *Spec) { s.Stages[1].Event = "" }, "stages[1].event", "is missing"},
		{"bad event", func(s *Spec) { s.Stages[0].Event = "order unshipped" }, "stages[0].event", "invalid event name"},
		{"bad stage name", func(s *Spec) { s.Stages[0].Name = "a/b" }, "stages[0].stage", "invalid stage name"},
		{"same event twice", func(s *Spec) { s.Stages[1].Event = "order.unshipped" }, "stages[1].event", `stage name "order.unshipped" is already used by stages[0]`},
		{"same stage name", func(s *Spec) { s.Stages[0].Name, s.Stages[1].Name = "x", "x" }, "stages[1].stage", "already used"},
		{"long severity", func(s *Spec) { s.Stages[0].Severity = strings.Repeat("x", 101) }, "stages[0].severity", "more than the 100 allowed"},
		{"control in severity", func(s *Spec) { s.Stages[0].Severity = "a\nb" }, "stages[0].severity", "control character"},
		{"bad await", func(s *Spec) { s.Awaits = []string{"ship ped"} }, "awaits[0]", "invalid event name"},
		{"await twice", func(s *Spec) { s.Awaits = []string{"shipped", "shipped"} }, "awaits[1]", "listed twice"},
		{"bad sink", func(s *Spec) { s.Sinks = []string{""} }, "sinks[0]", "invalid sink name"},
		{"sink twice", func(s *Spec) { s.Sinks = []string{"ops", "ops"} }, "sinks[1]", "listed twice"},
		{"negative batch", func(s *Spec) { s.BatchSize = -1 }, "batch_size", "must be positive"},
		{"bad max checks", func(s *Spec) { s.Guards = guards.Limits{MaxChecks: -2} }, "guards.max_checks", "or -1"},
		{"bad runtime", func(s *Spec) { s.Guards = guards.Limits{Runtime: -time.Second} }, "guards.runtime", "must be positive"},
		{"bad horizon", func(s *Spec) { s.Guards = guards.Limits{Horizon: -time.Second} }, "guards.horizon", "or -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Stages = append([]Stage(nil), s.Stages...)
			tt.change(&s)
			fes := FieldErrors(s.Validate())
			if len(fes) != 1 || fes[0].Field != tt.field || !strings.Contains(fes[0].Err.Error(), tt.msg) {
				t.Fatalf("got %v; want one error at %q containing %q", fes, tt.field, tt.msg)
			}
		})
	}
	// Every problem is reported, not only the first.
	s = validSpec()
	s.Entity, s.Stages = "", []Stage{{After: -1, Event: "x"}, {After: -2}}
	if fes := FieldErrors(s.Validate()); len(fes) != 4 {
		t.Errorf("a spec with 4 problems: %d errors: %v", len(fes), fes)
	}
}

func TestKeysArg(t *testing.T) {
	keys := []string{"1", `a"b`, `c\d`, "é"}
	if got, want := KeysArg(Postgres, keys), `{"1","a\"b","c\\d","é"}`; got != want {
		t.Errorf("postgres: got %s, want %s", got, want)
	}
	if got, want := KeysArg(SQLite, keys), `["1","a\"b","c\\d","é"]`; got != want {
		t.Errorf("sqlite: got %s, want %s", got, want)
	}
	if got := KeysArg(Postgres, nil); got != "{}" {
		t.Errorf("postgres, no keys: %s", got)
	}
	if got := KeysArg(SQLite, nil); got != "[]" {
		t.Errorf("sqlite, no keys: %s", got)
	}
}

func TestLiteParams(t *testing.T) {
	tests := []struct {
		query string
		err   string // "" for none
	}{
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each($1))", ""},
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each($1)) AND x = $1", ""},
		{"SELECT id AS key, json_extract(doc, '$.a') FROM o WHERE id IN (SELECT value FROM json_each($1))", ""},
		{"SELECT id AS key FROM o -- no $2 here\nWHERE id IN (SELECT value FROM json_each($1)) /* nor :x */", ""},
		{"SELECT id AS key FROM o", "does not use $1"},
		{"SELECT id AS key FROM o WHERE id = '$1'", "does not use $1"},
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each($1)) AND s = $2", "the parameter $2"},
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each(?))", "the parameter ?"},
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each(:keys))", "the parameter :keys"},
		{"SELECT id AS key FROM o WHERE id IN (SELECT value FROM json_each($10))", "the parameter $10"},
	}
	for _, tt := range tests {
		err := liteParams(tt.query)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%q: %v, want nil", tt.query, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q: %v, want an error containing %q", tt.query, err, tt.err)
		}
	}
}

func TestAnchorTime(t *testing.T) {
	want := time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)
	for _, v := range []any{
		want,
		want.In(time.FixedZone("x", 3600)),
		"2025-06-01 12:30:00",
		"2025-06-01T12:30:00Z",
		"2025-06-01 14:30:00+02:00",
		"2025-06-01 12:30:00.000000000+00:00",
		[]byte("2025-06-01T12:30:00"),
		int64(want.Unix()),
		float64(want.Unix()),
	} {
		got, err := anchorTime(v)
		if err != nil || !got.Equal(want) {
			t.Errorf("anchorTime(%#v) = %s, %v; want %s", v, got, err, want)
		}
	}
	// Integers out of range as numbers are refused as floats are: the year
	// 2223 in seconds, and times before 1970 (found by a trial of time).
	for _, v := range []any{nil, "tomorrow", true, math.NaN(), int64(8000000000), int64(-100), int64(-5), float64(-5)} {
		if got, err := anchorTime(v); err == nil {
			t.Errorf("anchorTime(%#v) = %s, want an error", v, got)
		}
	}
}

type marshaler struct{}

func (marshaler) MarshalJSON() ([]byte, error) { return []byte(`12.50`), nil }

func TestJSONValue(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, `null`},
		{int64(7), `7`},
		{3.5, `3.5`},
		{math.Inf(1), `"+Inf"`},
		{"a\"b", `"a\"b"`},
		{true, `true`},
		{[]byte("text"), `"text"`},
		{[]byte{0xff, 0x00}, `"/wA="`},
		{time.Date(2025, 6, 1, 14, 0, 0, 5, time.FixedZone("x", 7200)), `"2025-06-01T12:00:00.000000005Z"`},
		{[16]byte{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0}, `"12345678-9abc-def0-1234-56789abcdef0"`},
		{marshaler{}, `12.50`},
		{map[string]any{"a": 1}, `{"a":1}`},
		{make(chan int), ``}, // its text, which depends on the run
	}
	for _, tt := range tests {
		got := string(jsonValue(tt.v))
		if !json.Valid([]byte(got)) {
			t.Errorf("jsonValue(%#v) = %s, not JSON", tt.v, got)
		}
		if tt.want != "" && got != tt.want {
			t.Errorf("jsonValue(%#v) = %s, want %s", tt.v, got, tt.want)
		}
	}
	if got, ok := keyText(int64(42)); got != "42" || !ok {
		t.Errorf("keyText(42) = %q, %v", got, ok)
	}
	if _, ok := keyText(nil); ok {
		t.Error("keyText(nil) is a key")
	}
}
