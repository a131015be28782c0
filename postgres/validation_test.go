package postgres_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/slots"
)

// The SQL functions refuse the names and keys holding control or invisible
// characters that Go refuses, with Go's message, which itself holds none of
// them: a key like "42\x1b[31m" used to be stored and printed raw.
func TestSQLRefusesControlAndInvisibleCharacters(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	// Every forbidden character but U+0000, which text cannot hold, at the
	// end of a key, and some neighbours that are allowed.
	var bad []string
	for r := rune(1); r <= 0x9f; r++ {
		if r <= 0x1f || r >= 0x7f {
			bad = append(bad, string(r))
		}
	}
	bad = append(bad, "\u061c", "\u200b", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
		"\u2060", "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff")
	good := []string{" ", "~", "\u00a0", "\u00a0", "\u061b", "\u200c", "\u200d", "\u2027", "\u202f", "\u2065", "\u206a", "\ufefe", "😀"}
	var keys []string
	for _, c := range append(bad, good...) {
		keys = append(keys, "4€2"+c)
	}
	keys = append(keys, "\x1b[31mred\x1b[0m", "invoice\u202egnp.exe", "ok\u202e\n")
	for _, key := range keys {
		want := ""
		if err := checks.ValidateKey("order", key); err != nil {
			want = err.Error()
		}
		for _, sql := range []string{
			`SELECT prescient_schedule('order', $1, 'unshipped', '2031-03-04T05:00:00Z')`,
			`SELECT prescient_cancel('order', $1)`,
			`SELECT prescient_cancel('order', $1, 'unshipped')`,
			`SELECT prescient_resolve('order', $1, 'paid')`,
		} {
			_, err := s.Pool().Exec(ctx, sql, key)
			wantSQLError(t, sql, "key", key, err, want)
		}
	}
	names := []string{"order\n", "tab\tname", "\x1b[31mred", "csi\u009b31m", "del\x7f", "ü\u202eredro", "a\u2066b", "a\u2028b", "\ufeffa", "a\u200bb",
		"ünïcode", "bad name", "ok", strings.Repeat("a", 100), strings.Repeat("a", 101), strings.Repeat("ü", 60), strings.Repeat("x", 1<<20)}
	for _, name := range names {
		for _, c := range []struct{ what, sql string }{
			{"entity", `SELECT prescient_schedule($1, 'k', 'unshipped', '2031-03-04T05:00:00Z')`},
			{"check", `SELECT prescient_schedule('order', 'k', $1, '2031-03-04T05:00:00Z')`},
			{"entity", `SELECT prescient_cancel($1, 'k')`},
			{"check", `SELECT prescient_cancel('order', 'k', $1)`},
			{"event", `SELECT prescient_resolve('order', 'k', $1)`},
		} {
			want := ""
			if err := checks.ValidateName(c.what, name); err != nil {
				want = err.Error()
			}
			_, err := s.Pool().Exec(ctx, c.sql, name)
			wantSQLError(t, c.sql, c.what+" name", name, err, want)
		}
	}
}

// wantSQLError fails unless err is want ("" for no error) as a
// PostgreSQL error of SQLSTATE 22023.
func wantSQLError(t *testing.T, sql, what, value string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s with %s %+q: %v, want success as Go allows it", sql, what, value, err)
		}
		return
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
		t.Errorf("%s with %s %+q: %v, want SQLSTATE 22023", sql, what, value, err)
		return
	}
	if pgErr.Message != want {
		t.Errorf("%s with %s %+q:\n got %s\nwant %s", sql, what, value, pgErr.Message, want)
	}
}

// prescient_validate_payload refuses the payloads Go refuses for their size
// or depth, with Go's message.
func TestSQLValidatePayload(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	nest := func(n int, inner string) string {
		return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
	}
	nestObjects := func(n int, inner string) string {
		return strings.Repeat(`{"a": `, n) + inner + strings.Repeat("}", n)
	}
	payloads := []string{
		`{"amount": 42}`, `42`, `null`,
		nest(64, ""), nest(64, "1"), nestObjects(64, "1"), nestObjects(32, nest(32, "")), nest(62, `{"a": 1, "b": [1, 2]}`),
		nest(65, ""), nestObjects(65, "1"), nestObjects(32, nest(33, "")), nest(64, `{"a": 1}`), nest(10000, ""),
		nest(64, `["`+strings.Repeat("x", checks.PayloadMax)+`"]`),
		// A JSON string prints the same from jsonb as it was sent.
		`"` + strings.Repeat("x", checks.PayloadMax-2) + `"`, `"` + strings.Repeat("x", checks.PayloadMax-1) + `"`,
	}
	for _, p := range payloads {
		want := ""
		if err := checks.ValidatePayload([]byte(p)); err != nil {
			want = "order/k/c: " + err.Error()
		}
		name := p
		if len(name) > 40 {
			name = name[:40] + "…"
		}
		_, err := s.Pool().Exec(ctx, `SELECT prescient_validate_payload('order', 'k', 'c', $1::jsonb)`, p)
		wantSQLError(t, "prescient_validate_payload", "payload", name, err, want)
	}
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_validate_payload('order', 'k', 'c', NULL)`); err != nil {
		t.Errorf("prescient_validate_payload with no payload: %v", err)
	}
}

// What Go refuses in a payload beyond its size and depth, PostgreSQL's
// jsonb refuses before prescient_schedule is called, with its own errors:
// it cannot hold \u0000 or half a surrogate pair, and text must be UTF-8.
// Nothing is stored.
func TestSQLScheduleRefusesPayloadsJSONBCannotHold(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	for _, c := range []struct{ payload, code string }{
		{`{"a": "\u0000"}`, "22P05"},
		{`{"\u0000": 1}`, "22P05"},
		{`["\ud800"]`, "22P02"},
		{`"\udc00"`, "22P02"},
		{"{\"a\": \"\xff\"}", "22021"},
	} {
		if checks.ValidatePayload([]byte(c.payload)) == nil {
			t.Errorf("Go accepts payload %+q", c.payload)
		}
		_, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', 'k', 'unshipped', '2031-03-04T05:00:00Z', $1::jsonb)`, c.payload)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code {
			t.Errorf("prescient_schedule with payload %+q: %v, want SQLSTATE %s", c.payload, err, c.code)
		}
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM prescient_jobs`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs stored (%v), want none", n, err)
	}
	// The same characters written as UTF-8 or escaped differently are text.
	ok := json.RawMessage(`{"a": "\\u0000", "b": "\ud83d\ude00"}`)
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', 'k', 'unshipped', '2031-03-04T05:00:00Z', $1::jsonb)`, string(ok)); err != nil {
		t.Errorf("prescient_schedule with payload %s: %v", ok, err)
	}
}

// prescient_schedule applies Go's payload rules through
// prescient_validate_payload: a payload nested deeper than Go allows is
// refused with Go's message, and nothing is stored.
func TestSQLScheduleRefusesDeepPayloads(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: 15 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	want := checks.ValidatePayload([]byte(deep))
	if want == nil {
		t.Fatal("Go accepts a payload 100 levels deep")
	}
	_, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', 'k', 'c', now() + interval '1 hour', $1::jsonb)`, deep)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" || pgErr.Message != "order/k/c: "+want.Error() {
		t.Fatalf("prescient_schedule of a payload 100 levels deep: %v, want 22023 %q", err, "order/k/c: "+want.Error())
	}
	var n int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM prescient_jobs`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d jobs stored, %v; want none", n, err)
	}
}

// prescient_schedule refuses a job of another entity for a check the
// catalog records as watching one entity only (every declared check): it
// could only fail, and raise no alert (found by an operator's trial: a
// typo, orders for order, was taken). A check recorded without an entity,
// or not recorded, takes any.
func TestSQLScheduleRefusesAnotherEntityThanTheChecks(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatalf("save grid: %v", err)
	}
	if err := s.CatalogSave(ctx, []driver.CatalogEntry{{Check: "order_late", Entity: "order"}, {Check: "any_entity"}}); err != nil {
		t.Fatal(err)
	}
	const sql = `SELECT prescient_schedule($1, '1', $2, '2031-03-04T05:00:00Z')`
	_, err := s.Pool().Exec(ctx, sql, "orders", "order_late")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22023" ||
		pgErr.Message != "prescient_schedule: check order_late watches entity order only: a job of entity orders could only fail" {
		t.Errorf("schedule order_late for entity orders: %v, want SQLSTATE 22023 naming both entities", err)
	}
	for _, c := range [][2]string{{"order", "order_late"}, {"invoice", "any_entity"}, {"invoice", "not_in_the_catalog"}} {
		if _, err := s.Pool().Exec(ctx, sql, c[0], c[1]); err != nil {
			t.Errorf("schedule %s for entity %s: %v", c[1], c[0], err)
		}
	}
}
