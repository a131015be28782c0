package prescient_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// nested returns n arrays nested in one another around inner.
func nested(n int, inner string) string {
	return strings.Repeat("[", n) + inner + strings.Repeat("]", n)
}

// nestedValue returns n Go slices nested in one another around inner.
func nestedValue(n int, inner any) any {
	v := inner
	for range n {
		v = []any{v}
	}
	return v
}

// Every store refuses the same payloads with the same error, before it is
// called, and keeps the same ones: PostgreSQL's jsonb used to refuse \u0000
// and invalid UTF-8 with a driver error where SQLite stored them, and SQLite
// refused deep nesting with a failed CHECK where PostgreSQL stored it.
func TestSchedulePayloadRulesAreTheSameOnEveryStore(t *testing.T) {
	const (
		deep = "payload nests arrays and objects more than 64 levels deep"
		nul  = "PostgreSQL cannot store the NUL character in JSON, so no payload may hold it"
		half = "half of a surrogate pair without its other half: a \\u escape must name a whole character"
	)
	bad := []struct {
		name    string
		payload any
		want    string // after "prescient: schedule: order/1/c: "
	}{
		{"NUL in a value", json.RawMessage(`{"a":"\u0000"}`), `payload holds \u0000 at offset 6: ` + nul},
		{"NUL in a key", json.RawMessage(`{"\u0000":1}`), `payload holds \u0000 at offset 2: ` + nul},
		{"NUL in a Go string", map[string]string{"a": "x\x00"}, `payload holds \u0000 at offset 7: ` + nul},
		{"lone surrogate", json.RawMessage(`["\ud800"]`), `payload holds \ud800 at offset 2, ` + half},
		{"invalid UTF-8", json.RawMessage("{\"a\":\"\xff\"}"), "payload is not UTF-8: byte 0xff at offset 6; JSON text must be UTF-8"},
		{"65 levels", json.RawMessage(nested(65, "")), deep},
		{"10000 levels", json.RawMessage(nested(10000, "")), deep},
		{"65 levels of Go slices", nestedValue(65, 1), deep},
		{"not JSON", json.RawMessage(`{amount: 3}`), "payload is not valid JSON: invalid character 'a' looking for beginning of object key string"},
		{"empty", json.RawMessage{}, "payload is not valid JSON: unexpected end of JSON input"},
	}
	good := []struct {
		name    string
		payload any
		want    string // as read back
	}{
		{"64 levels", json.RawMessage(nested(64, "1")), nested(64, "1")},
		{"surrogate pair and escaped backslash", json.RawMessage(`["\ud83d\ude00","\\u0000"]`), `["😀", "\\u0000"]`},
		{"invalid UTF-8 in a Go string", map[string]string{"a": "\xff"}, `{"a": "` + "\ufffd" + `"}`},
	}
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil), nil)
		at := ts("2026-03-10T11:00:00Z")
		for _, tt := range bad {
			_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "c", At: at, Payload: tt.payload})
			want := "prescient: schedule: order/1/c: " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("%s: Schedule\n got %v\nwant %s", tt.name, err, want)
			}
		}
		if n := h.count("SELECT * FROM prescient_jobs"); n != 0 {
			t.Errorf("%d jobs stored with a refused payload", n)
		}
		for i, tt := range good {
			key := string(rune('a' + i))
			if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: "c", At: at, Payload: tt.payload}); err != nil {
				t.Errorf("%s: Schedule: %v", tt.name, err)
				continue
			}
			j, err := c.Job(ctx, "order", key, "c")
			if err != nil {
				t.Errorf("%s: Job: %v", tt.name, err)
				continue
			}
			// PostgreSQL prints jsonb its own way; compare the values.
			var got, want any
			if err := json.Unmarshal(j.Payload, &got); err != nil {
				t.Errorf("%s: stored payload %s: %v", tt.name, j.Payload, err)
				continue
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
				t.Errorf("%s: stored payload %s, want %s", tt.name, g, w)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// No key with a control or invisible character gets into a store, through
// any call that takes one, on any store: such a key garbles the tables the
// CLI prints and can carry terminal escape sequences.
func TestKeysRefuseControlAndInvisibleCharacters(t *testing.T) {
	const rule = "a key is 1 to 512 bytes of UTF-8 text without control characters, bidirectional controls, " +
		"line or paragraph separators or zero-width characters"
	keys := []struct{ key, want string }{
		{"42\n", "entity order: key has U+000A, a control character, at character 3: " + rule},
		{"\x1b[31m42", "entity order: key has U+001B, a control character, at character 1: " + rule},
		{"42\u009b2J", "entity order: key has U+009B, a control character, at character 3: " + rule},
		{"42\u202e24", "entity order: key has U+202E, a bidirectional control, at character 3: " + rule},
		{"4\u20662", "entity order: key has U+2066, a bidirectional control, at character 2: " + rule},
		{"4\u20282", "entity order: key has U+2028, a line or paragraph separator, at character 2: " + rule},
		{"4\u200b2", "entity order: key has U+200B, a zero-width character, at character 2: " + rule},
	}
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		clk := newClock("2026-03-10T10:00:00Z")
		c := h.client(clk, register(t, "c", func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil },
			&checks.Opts{Awaits: []string{"paid"}}), nil)
		at := ts("2026-03-10T11:00:00Z")
		for _, k := range keys {
			_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: k.key, Check: "c", At: at})
			wantErr(t, "Schedule", k.key, err, "prescient: schedule: "+k.want)
			_, err = c.ScheduleMany(ctx, []prescient.ScheduleParams{
				{Entity: "order", Key: "ok", Check: "c", At: at},
				{Entity: "order", Key: k.key, Check: "c", At: at},
			})
			wantErr(t, "ScheduleMany", k.key, err, "prescient: schedule #1: "+k.want)
			_, err = c.Reschedule(ctx, "order", k.key, "c", at)
			wantErr(t, "Reschedule", k.key, err, "prescient: reschedule: "+k.want)
			_, err = c.Cancel(ctx, "order", k.key, "")
			wantErr(t, "Cancel", k.key, err, "prescient: cancel: "+k.want)
			_, err = c.Resolve(ctx, "order", k.key, "paid")
			wantErr(t, "Resolve", k.key, err, "prescient: resolve: "+k.want)
		}
		if n := h.count("SELECT * FROM prescient_jobs"); n != 0 {
			t.Errorf("%d jobs stored, want none", n)
		}
	})
}

func wantErr(t *testing.T, call, key string, err error, want string) {
	t.Helper()
	if err == nil || err.Error() != want {
		t.Errorf("%s with key %q\n got %v\nwant %s", call, key, err, want)
	}
}

// A sweep schedule written as a duration ("5s") was refused with robfig/
// cron's "expected exactly 5 fields", which does not say what to write
// (found by a new user following the README).
func TestSweepScheduleErrorSaysTheFormat(t *testing.T) {
	cfg := prescient.Config{SweepSchedule: "5s"}
	err := cfg.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "@every 5s") {
		t.Errorf("sweep schedule \"5s\": error %v, want one naming the forms it takes (\"@every 5s\")", err)
	}
}

// A sweep or prune schedule cron would run every second whatever it says
// (@every 0s, -5s, 100ms), or never (the 30th of February), is refused
// (found by an operator's trial).
func TestSchedulesThatCronWouldNotKeepAreRefused(t *testing.T) {
	for spec, want := range map[string]string{
		"@every 0s":                      "an @every must be at least 1s",
		"@every -5s":                     "runs every -5s",
		"@every 100ms":                   "runs every 100ms",
		"TZ=UTC @every 100ms":            "runs every 100ms",
		"CRON_TZ=Europe/Paris @every 0s": "an @every must be at least 1s",
		"0 0 30 2 *":                     "never comes",
		// cron.Every drops the fraction (found by a trial of time).
		"@every 1500ms":           "cron keeps whole seconds and would run it every 1s",
		"CRON_TZ=UTC @every 2.5s": "would run it every 2s",
	} {
		for _, cfg := range []prescient.Config{{SweepSchedule: spec}, {PruneSchedule: spec}} {
			if err := cfg.WithDefaults().Validate(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("schedule %q: error %v, want one containing %q", spec, err, want)
			}
		}
	}
	for _, spec := range []string{"@every 1s", "@every 5m", "@every 1m30s", "*/15 * * * *", "0 0 29 2 *", "-"} {
		if err := (prescient.Config{SweepSchedule: spec, PruneSchedule: spec}).WithDefaults().Validate(); err != nil {
			t.Errorf("schedule %q: %v, want it taken", spec, err)
		}
	}
}

// A check registered for one entity (checks.Opts.Entity, as every declared
// check is) is not scheduled for another: its job could only fail, and
// raise no alert (found by an operator's trial: a typo, orders for order,
// was accepted by the CLI, the HTTP API and the library).
func TestScheduleRefusesAnotherEntityThanTheChecks(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	c := h.client(newClock("2026-03-10T10:00:00Z"), register(t, "order_late", noop, &checks.Opts{Entity: "order"}), nil)
	at := ts("2026-03-10T11:00:00Z")
	_, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "orders", Key: "1", Check: "order_late", At: at})
	if !errors.Is(err, prescient.ErrWrongEntity) || !strings.Contains(err.Error(), "orders/1/order_late: wrong entity for the check: check order_late watches entity order only") {
		t.Errorf("schedule order_late for entity orders: %v, want ErrWrongEntity naming both entities", err)
	}
	_, err = c.ScheduleMany(ctx, []prescient.ScheduleParams{{Entity: "order", Key: "1", Check: "order_late", At: at}, {Entity: "invoice", Key: "1", Check: "order_late", At: at}})
	if !errors.Is(err, prescient.ErrWrongEntity) {
		t.Errorf("schedule many with one of another entity: %v, want ErrWrongEntity", err)
	}
	if n := h.count("SELECT * FROM prescient_jobs"); n != 0 {
		t.Errorf("%d job(s) scheduled, want none", n)
	}
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "order_late", At: at}); err != nil {
		t.Errorf("schedule order_late for entity order: %v", err)
	}
	reg := &checks.Registry{}
	if err := reg.Register("c", noop, &checks.Opts{Entity: "bad entity"}); err == nil {
		t.Error("a check registered for entity \"bad entity\": no error")
	}
}

// The …Tx methods refuse a nil transaction, as TypedClient's do: one the
// application forgot to begin ran the call in a transaction of its own,
// committed at once whatever became of the application's writes (found by a
// new user's trial of the library).
func TestTxMethodsRefuseANilTransaction(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	c := h.client(newClock("2026-03-10T10:00:00Z"), register(t, "c", noop, nil), nil)
	p := prescient.ScheduleParams{Entity: "order", Key: "1", Check: "c", At: ts("2026-03-10T11:00:00Z")}
	if _, err := c.Schedule(ctx, p); err != nil {
		t.Fatal(err)
	}
	var tx any
	_, err1 := c.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: "order", Key: "2", Check: "c", At: p.At})
	_, err2 := c.ScheduleManyTx(ctx, tx, []prescient.ScheduleParams{{Entity: "order", Key: "3", Check: "c", At: p.At}})
	_, err3 := c.RescheduleTx(ctx, tx, "order", "1", "c", ts("2026-03-10T12:00:00Z"))
	_, err4 := c.CancelTx(ctx, tx, "order", "1", "c")
	_, err5 := c.ResolveTx(ctx, tx, "order", "1", "shipped")
	_, err6 := c.ScheduleManyTx(ctx, tx, nil)
	for i, err := range []error{err1, err2, err3, err4, err5, err6} {
		if !errors.Is(err, prescient.ErrNilTx) || !strings.Contains(err.Error(), "nil transaction: use the method without Tx") {
			t.Errorf("call %d with a nil transaction: %v, want it refused", i+1, err)
		}
	}
	if n := h.count("SELECT * FROM prescient_jobs WHERE next_check_at = next_check_at"); n != 1 {
		t.Errorf("%d job(s) pending, want the first alone, untouched", n)
	}
	if j, err := c.Job(ctx, "order", "1", "c"); err != nil || !j.NextCheckAt.Equal(p.At) {
		t.Errorf("job 1: %+v, %v; want it due at %s still", j, err, p.At)
	}
}

// A []byte payload, as json.Marshal returns it, is JSON already: it was
// marshalled again into a base64 string, which a check unmarshalling it
// into its struct could only fail on (found by a new user's trial). One
// that is not JSON is refused.
func TestBytePayloadIsJSON(t *testing.T) {
	forEachStore(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
		c := h.client(newClock("2026-03-10T10:00:00Z"), register(t, "c", noop, nil), nil)
		raw, err := json.Marshal(map[string]bool{"second": true})
		if err != nil {
			t.Fatal(err)
		}
		j, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "c", At: ts("2026-03-10T11:00:00Z"), Payload: raw})
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Second bool }
		if err := json.Unmarshal(j.Payload, &got); err != nil || !got.Second {
			t.Errorf("payload stored %s (%v), want {\"second\": true}", j.Payload, err)
		}
		if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "2", Check: "c", At: ts("2026-03-10T11:00:00Z"), Payload: []byte("not json")}); err == nil {
			t.Error("a []byte payload that is not JSON: no error")
		}
	})
}

// FinishedBy, written into history as finished_by beside the servers'
// names, takes a name as Server does: an escape sequence or a newline in it
// reached every reader of history (found by a Go user's trial).
func TestFinishedByIsAName(t *testing.T) {
	for _, bad := range []string{"\x1b[31mevil\nline", "web 1", "-cli"} {
		err := prescient.Config{FinishedBy: bad}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "config: FinishedBy: invalid finished_by name") {
			t.Errorf("FinishedBy %q: error %v, want one naming FinishedBy", bad, err)
		}
	}
	for _, good := range []string{"", "cli", "billing-worker.1"} {
		if err := (prescient.Config{FinishedBy: good}).WithDefaults().Validate(); err != nil {
			t.Errorf("FinishedBy %q: %v", good, err)
		}
	}
}
