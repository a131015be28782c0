package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/httpapi"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// now is the clock of every client here: times and slots are fixed.
var now = time.Date(2026, 3, 10, 9, 0, 0, 0, time.UTC)

const token = "test-token-0123456789abcdef"

// logBuffer is a bytes.Buffer safe to write from the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// apiEnv is the API over one store, served on loopback.
type apiEnv struct {
	t      *testing.T
	url    string
	store  prescient.Store
	client *prescient.Client
	log    *logBuffer
	// secrets are what no answer may tell: the database's URL, schema or
	// file.
	secrets []string
}

// store opens a migrated store of one kind for t, and names what about it
// must stay secret.
type store struct {
	name string
	open func(t *testing.T) (prescient.Store, []string)
}

var stores = []store{
	{"sqlite", func(t *testing.T) (prescient.Store, []string) {
		path := filepath.Join(t.TempDir(), "prescient.db")
		s, err := sqlite.Open(context.Background(), path, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, []string{path}
	}},
	{"postgres", func(t *testing.T) (prescient.Store, []string) {
		url, schema := pgtest.Schema(t)
		s, err := postgres.Open(context.Background(), url, &postgres.Opts{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s, []string{url, schema, "127.0.0.1", "root"}
	}},
}

// eachStore runs f against the API over each store, in parallel.
func eachStore(t *testing.T, opts *httpapi.Opts, f func(t *testing.T, e *apiEnv)) {
	t.Helper()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			st, secrets := s.open(t)
			if err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			reg := &checks.Registry{}
			noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
			if err := reg.Register("order_unshipped", noop, &checks.Opts{Awaits: []string{"shipped"}}); err != nil {
				t.Fatal(err)
			}
			if err := reg.Register("invoice_unsent", noop, &checks.Opts{Entity: "invoice"}); err != nil {
				t.Fatal(err)
			}
			if err := reg.Register("order_unpaid", noop, &checks.Opts{Awaits: []string{"paid"}}); err != nil {
				t.Fatal(err)
			}
			client, err := prescient.NewClient(st, &prescient.Config{Server: "api-test", Checks: reg, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if err := client.SyncCatalog(context.Background()); err != nil {
				t.Fatal(err)
			}
			o := httpapi.Opts{Token: token}
			if opts != nil {
				o = *opts
			}
			log := &logBuffer{}
			o.Logger = slog.New(slog.NewTextHandler(log, nil))
			srv := httptest.NewServer(httpapi.New(client, &o))
			t.Cleanup(srv.Close)
			f(t, &apiEnv{t: t, url: srv.URL, store: st, client: client, log: log, secrets: secrets})
		})
	}
}

// response is what the API answered.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorBody is the JSON of every answer that is not a success.
type errorBody struct {
	Error string  `json:"error"`
	Field *string `json:"field"`
}

// do sends a request with the token. body is sent as it is when it is a
// string or an io.Reader, as JSON otherwise; edit may change the request
// (its headers) before it goes.
func (e *apiEnv) do(method, path string, body any, edit ...func(*http.Request)) response {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case io.Reader:
		r = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, f := range edit {
		f(req)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Errorf("%s %s: Content-Type %q, want application/json; body %s", method, path, ct, raw)
	}
	return response{res.StatusCode, res.Header, raw}
}

// ok sends a request that must succeed with status, and decodes its answer
// into v.
func (e *apiEnv) ok(status int, method, path string, body, v any) {
	e.t.Helper()
	res := e.do(method, path, body)
	if res.status != status {
		e.t.Fatalf("%s %s %v: status %d, want %d; body %s", method, path, body, res.status, status, res.body)
	}
	if err := json.Unmarshal(res.body, v); err != nil {
		e.t.Fatalf("%s %s: answer %s is not the JSON wanted: %v", method, path, res.body, err)
	}
}

// job is a job as the API writes it.
type job struct {
	ID           int64           `json:"id"`
	Entity       string          `json:"entity"`
	Key          string          `json:"key"`
	Check        string          `json:"check"`
	FirstCheckAt time.Time       `json:"first_check_at"`
	NextCheckAt  time.Time       `json:"next_check_at"`
	Payload      json.RawMessage `json:"payload"`
}

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestAPIJobLifecycle schedules, lists, resolves, cancels and reads history
// over HTTP, on each store, and shows each call idempotent where the Go
// call is.
func TestAPIJobLifecycle(t *testing.T) {
	t.Parallel()
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		var j job
		e.ok(http.StatusCreated, "POST", "/v1/schedule",
			// The payload's own fields are its own: any case, any name.
			map[string]any{"entity": "order", "key": "42", "check": "order_unshipped", "in": "3h", "payload": map[string]int{"amount": 12, "Entity": 1, "in": 2}}, &j)
		if j.Entity != "order" || j.Key != "42" || j.Check != "order_unshipped" || !j.NextCheckAt.Equal(at("2026-03-10T12:00:00Z")) || j.ID == 0 {
			t.Errorf("schedule in 3h at %s: job %+v, want order/42/order_unshipped due 2026-03-10T12:00:00Z", now, j)
		}
		var amount struct{ Amount int }
		if err := json.Unmarshal(j.Payload, &amount); err != nil || amount.Amount != 12 {
			t.Errorf("payload %s, want {\"amount\": 12}", j.Payload)
		}
		first := j
		// HEAD is GET without the body (a monitor's probe; found by an
		// operator's trial: it was 405).
		for _, path := range []string{"/v1/jobs/order/42", "/v1/history"} {
			if res := e.do("HEAD", path, nil); res.status != http.StatusOK || len(res.body) != 0 {
				t.Errorf("HEAD %s: %d with %d bytes, want 200 and no body", path, res.status, len(res.body))
			}
		}

		// keep: the same request twice leaves the job as it is, 200.
		e.ok(http.StatusOK, "POST", "/v1/schedule",
			map[string]any{"entity": "order", "key": "42", "check": "order_unshipped", "at": "2030-01-01T10:07:00Z", "on_conflict": "keep"}, &j)
		if j.ID != first.ID || !j.NextCheckAt.Equal(first.NextCheckAt) {
			t.Errorf("on_conflict keep: job %+v, want it untouched (%+v)", j, first)
		}
		// replace (the default) moves it to the slot of the new time, 200.
		e.ok(http.StatusOK, "POST", "/v1/schedule",
			map[string]any{"entity": "order", "key": "42", "check": "order_unshipped", "at": "2030-01-01T11:07:00+01:00"}, &j)
		if j.ID != first.ID || !j.NextCheckAt.Equal(at("2030-01-01T10:15:00Z")) {
			t.Errorf("replace: job %+v, want job %d moved to 2030-01-01T10:15:00Z", j, first.ID)
		}
		j = job{}
		e.ok(http.StatusCreated, "POST", "/v1/schedule",
			map[string]any{"entity": "order", "key": "42", "check": "order_unpaid", "at": "2026-03-10T09:20:00Z", "payload": nil}, &j)
		if j.Payload != nil {
			t.Errorf("payload null: stored %s, want none", j.Payload)
		}
		// A key holding '/', a space and a non-ASCII letter, escaped in the
		// path.
		e.ok(http.StatusCreated, "POST", "/v1/schedule",
			map[string]any{"entity": "order", "key": "eu/7 é", "check": "order_unshipped", "in": "0s"}, &j)
		if !j.NextCheckAt.Equal(at("2026-03-10T09:15:00Z")) {
			t.Errorf("in 0s at %s: due %s, want the next slot 2026-03-10T09:15:00Z", now, j.NextCheckAt)
		}

		var list struct{ Jobs []job }
		e.ok(http.StatusOK, "GET", "/v1/jobs/order/42", nil, &list)
		if len(list.Jobs) != 2 || list.Jobs[0].Check != "order_unpaid" || list.Jobs[1].Check != "order_unshipped" {
			t.Errorf("GET /v1/jobs/order/42: %+v, want order_unpaid (due first) and order_unshipped", list.Jobs)
		}
		e.ok(http.StatusOK, "GET", "/v1/jobs/order/eu%2F7%20%C3%A9", nil, &list)
		if len(list.Jobs) != 1 || list.Jobs[0].Key != "eu/7 é" {
			t.Errorf("GET the escaped key: %+v, want the job of key \"eu/7 é\"", list.Jobs)
		}
		// None pending is an empty list, written [] (not null).
		res := e.do("GET", "/v1/jobs/order/43", nil)
		if res.status != http.StatusOK || string(res.body) != "{\"jobs\":[]}\n" {
			t.Errorf("GET /v1/jobs/order/43: %d %s, want 200 {\"jobs\":[]}", res.status, res.body)
		}

		var n map[string]int // every answer decoded into a fresh map
		e.ok(http.StatusOK, "POST", "/v1/resolve", map[string]string{"entity": "order", "key": "42", "event": "shipped"}, &n)
		if n["resolved"] != 1 || len(n) != 1 {
			t.Errorf("resolve shipped: %v, want {resolved: 1}", n)
		}
		n = nil
		e.ok(http.StatusOK, "POST", "/v1/resolve", map[string]string{"entity": "order", "key": "42", "event": "shipped"}, &n)
		if n["resolved"] != 0 {
			t.Errorf("resolve shipped again: %v, want {resolved: 0}", n)
		}
		n = nil
		e.ok(http.StatusOK, "POST", "/v1/cancel", map[string]string{"entity": "order", "key": "eu/7 é", "check": "order_unshipped"}, &n)
		if n["cancelled"] != 1 || len(n) != 1 {
			t.Errorf("cancel one check: %v, want {cancelled: 1}", n)
		}
		n = nil
		e.ok(http.StatusOK, "POST", "/v1/cancel", map[string]string{"entity": "order", "key": "42"}, &n)
		if n["cancelled"] != 1 {
			t.Errorf("cancel every check of order/42: %v, want {cancelled: 1} (order_unpaid)", n)
		}
		n = nil
		e.ok(http.StatusOK, "POST", "/v1/cancel", map[string]string{"entity": "order", "key": "42"}, &n)
		if n["cancelled"] != 0 {
			t.Errorf("cancel again: %v, want {cancelled: 0}", n)
		}
		e.ok(http.StatusOK, "GET", "/v1/jobs/order/42", nil, &list)
		if len(list.Jobs) != 0 {
			t.Errorf("GET /v1/jobs/order/42 after resolve and cancel: %+v, want none", list.Jobs)
		}

		var recs struct{ Records []history.Record }
		e.ok(http.StatusOK, "GET", "/v1/history?entity=order&key=42", nil, &recs)
		if got := outcomes(recs.Records); got != "order_unpaid:cancelled order_unshipped:resolved" {
			t.Errorf("history of order/42: %s, want the cancel, then (older) the resolve", got)
		}
		for _, tc := range []struct{ query, want string }{
			{"", "order_unshipped:cancelled order_unpaid:cancelled order_unshipped:resolved"},
			{"outcome=resolved", "order_unshipped:resolved"},
			{"outcome=resolved,cancelled&limit=2", "order_unshipped:cancelled order_unpaid:cancelled"},
			{"outcome=resolved&outcome=done", "order_unshipped:resolved"},
			{"check=order_unpaid", "order_unpaid:cancelled"},
			{"entity=order&key=eu%2F7+%C3%A9", "order_unshipped:cancelled"},
			{"entity=payout", ""},
			{"since=1h&until=2026-03-10T09:00:01Z", "order_unshipped:cancelled order_unpaid:cancelled order_unshipped:resolved"},
			{"since=2026-03-10T09:00:01Z", ""},
			{"until=2026-03-10T09:00:00Z", ""},
			{"entity=&key=&check=", "order_unshipped:cancelled order_unpaid:cancelled order_unshipped:resolved"},
		} {
			e.ok(http.StatusOK, "GET", "/v1/history?"+tc.query, nil, &recs)
			if got := outcomes(recs.Records); got != tc.want {
				t.Errorf("history?%s: %q, want %q", tc.query, got, tc.want)
			}
		}
		if res := e.do("GET", "/v1/history?entity=payout", nil); string(res.body) != "{\"records\":[],\"more\":false}\n" {
			t.Errorf("history of nothing: %s, want {\"records\":[],\"more\":false}", res.body)
		}

		// One record a page, following next: every record once, in order,
		// though all three finished at the same instant (the clock stands).
		var got []string
		q := "limit=1"
		for page := 0; ; page++ {
			if page > 4 {
				t.Fatalf("history pages never end; listed %v", got)
			}
			var p struct {
				Records []history.Record
				More    bool
				Next    *struct {
					AfterAt time.Time `json:"after_at"`
					AfterID int64     `json:"after_id"`
				}
			}
			e.ok(http.StatusOK, "GET", "/v1/history?"+q, nil, &p)
			got = append(got, outcomes(p.Records))
			if p.More != (p.Next != nil) {
				t.Fatalf("history?%s: more %v with next %v", q, p.More, p.Next)
			}
			if !p.More {
				break
			}
			q = fmt.Sprintf("limit=1&after_at=%s&after_id=%d", url.QueryEscape(p.Next.AfterAt.Format(time.RFC3339Nano)), p.Next.AfterID)
		}
		if want := "order_unshipped:cancelled order_unpaid:cancelled order_unshipped:resolved"; strings.Join(got, " ") != want {
			t.Errorf("history one record a page: %q, want %q", strings.Join(got, " "), want)
		}
		for _, tc := range []struct{ query, field, want string }{
			{"after_at=2026-03-10T09:00:00Z", "after_id", "after_at needs after_id"},
			{"after_id=3", "after_at", "after_id needs after_at"},
			{"after_at=yesterday&after_id=3", "after_at", `after_at "yesterday" is not an RFC 3339 time`},
			{"after_at=2026-03-10T09:00:00Z&after_id=-1", "after_id", `after_id "-1" is not a record's id`},
		} {
			res := e.do("GET", "/v1/history?"+tc.query, nil)
			var eb errorBody
			_ = json.Unmarshal(res.body, &eb)
			if res.status != http.StatusBadRequest || eb.Field == nil || *eb.Field != tc.field || !strings.Contains(eb.Error, tc.want) {
				t.Errorf("history?%s: %d %s, want 400 on field %s saying %q", tc.query, res.status, res.body, tc.field, tc.want)
			}
		}
	})
}

// outcomes lists records as "check:outcome", in order.
func outcomes(recs []history.Record) string {
	s := make([]string, len(recs))
	for i, r := range recs {
		s[i] = r.Check + ":" + string(r.Outcome)
	}
	return strings.Join(s, " ")
}

// chunkedBig stands for a body over the cap, sent without a length.
type chunkedBig struct{}

// TestAPIErrors sends every kind of bad request and checks the status, the
// headers, and the JSON body: its message, and the field it names.
func TestAPIErrors(t *testing.T) {
	t.Parallel()
	withHeader := func(k, v string) func(*http.Request) {
		return func(r *http.Request) {
			if v == "" {
				r.Header.Del(k)
			} else {
				r.Header.Set(k, v)
			}
		}
	}
	sched := func(fields string) string {
		return `{"entity": "order", "key": "42", "check": "order_unshipped"` + fields + `}`
	}
	big := sched(`, "in": "3h", "payload": "` + strings.Repeat("x", httpapi.MaxBodyDefault) + `"`)
	type tc struct {
		name         string
		method, path string
		body         any
		edit         []func(*http.Request)
		status       int
		field        string // "" for none
		want         string // in the message
		header       [2]string
	}
	tests := []tc{
		// 401, before anything else: an unknown route too.
		{"no token", "POST", "/v1/schedule", sched(`, "in": "3h"`), []func(*http.Request){withHeader("Authorization", "")},
			401, "", "no bearer token: send the header Authorization: Bearer TOKEN", [2]string{"WWW-Authenticate", `Bearer realm="prescient"`}},
		{"basic auth", "GET", "/v1/jobs/order/42", nil, []func(*http.Request){withHeader("Authorization", "Basic dXNlcjpwYXNz")},
			401, "", "must be Bearer TOKEN", [2]string{"WWW-Authenticate", `Bearer realm="prescient"`}},
		{"wrong token", "GET", "/v1/history", nil, []func(*http.Request){withHeader("Authorization", "Bearer "+token+"x")},
			401, "", "the bearer token is not valid", [2]string{}},
		{"prefix of the token", "GET", "/v1/history", nil, []func(*http.Request){withHeader("Authorization", "Bearer "+token[:8])},
			401, "", "the bearer token is not valid", [2]string{}},
		{"empty token", "GET", "/v1/history", nil, []func(*http.Request){withHeader("Authorization", "Bearer ")},
			401, "", "the bearer token is not valid", [2]string{}},
		{"no token, unknown route", "GET", "/v1/nope", nil, []func(*http.Request){withHeader("Authorization", "")},
			401, "", "no bearer token", [2]string{}},

		// 404 and 405.
		{"unknown route", "GET", "/v1/nope", nil, nil, 404, "", "no route GET /v1/nope: the routes are POST /v1/schedule", [2]string{}},
		{"jobs without a key", "GET", "/v1/jobs/order", nil, nil, 404, "", "GET /v1/jobs/{entity}/{key}", [2]string{}},
		{"root", "GET", "/", nil, nil, 404, "", "no route GET /:", [2]string{}},
		// Not the mux's redirect in HTML (found by an operator's trial).
		{"double slash", "GET", "//v1/history", nil, nil, 404, "", "no route GET //v1/history: write the path as /v1/history", [2]string{}},
		{"double slash in a POST", "POST", "/v1//schedule", sched(`, "in": "3h"`), nil, 404, "", "write the path as /v1/schedule", [2]string{}},
		{"dot segment", "GET", "/v1/./history", nil, nil, 404, "", "write the path as /v1/history", [2]string{}},
		{"key with a leading slash unescaped", "GET", "/v1/jobs/order//a", nil, nil, 404, "", "percent-encode the entity and the key (a key holding '/' as %2F", [2]string{}},
		// A slash typed after the key was read as part of it: an empty
		// list, as for a key with no jobs.
		{"slash after the key", "GET", "/v1/jobs/order/42/", nil, nil, 404, "", "the path ends in '/': write /v1/jobs/{entity}/{key} without it", [2]string{}},
		{"GET schedule", "GET", "/v1/schedule", nil, nil, 405, "", "GET is not allowed on /v1/schedule: use POST", [2]string{"Allow", "POST"}},
		{"PUT cancel", "PUT", "/v1/cancel", `{}`, nil, 405, "", "PUT is not allowed on /v1/cancel: use POST", [2]string{"Allow", "POST"}},
		{"POST jobs", "POST", "/v1/jobs/order/42", `{}`, nil, 405, "", "use GET", [2]string{"Allow", "GET, HEAD"}},
		{"DELETE history", "DELETE", "/v1/history", nil, nil, 405, "", "use GET", [2]string{"Allow", "GET, HEAD"}},

		// 415 and 413.
		{"text/plain", "POST", "/v1/schedule", sched(`, "in": "3h"`), []func(*http.Request){withHeader("Content-Type", "text/plain")},
			415, "", `Content-Type: application/json, got Content-Type "text/plain"`, [2]string{}},
		{"form", "POST", "/v1/cancel", "entity=order&key=42", []func(*http.Request){withHeader("Content-Type", "application/x-www-form-urlencoded")},
			415, "", "application/json", [2]string{}},
		{"no content type", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped"}`, []func(*http.Request){withHeader("Content-Type", "")},
			415, "", "got Content-Type none", [2]string{}},
		{"latin-1", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped"}`,
			[]func(*http.Request){withHeader("Content-Type", "application/json; charset=iso-8859-1")}, 415, "", "application/json", [2]string{}},
		{"too large", "POST", "/v1/schedule", big, nil, 413, "", fmt.Sprintf("larger than the %d bytes allowed", httpapi.MaxBodyDefault), [2]string{}},
		{"too large, chunked", "POST", "/v1/schedule", chunkedBig{}, nil,
			413, "", "larger than the", [2]string{}},

		// 400: the body.
		{"empty body", "POST", "/v1/schedule", "", nil, 400, "", "the body is empty: send a JSON object with the fields entity, key, check", [2]string{}},
		{"not JSON", "POST", "/v1/schedule", `{"entity": order}`, nil, 400, "", "the body is not valid JSON: invalid character 'o'", [2]string{}},
		{"cut short", "POST", "/v1/schedule", `{"entity": "order"`, nil, 400, "", "the body ends before its JSON object does", [2]string{}},
		{"an array", "POST", "/v1/cancel", `[{"entity": "order"}]`, nil, 400, "", "the body must be a JSON object with the fields entity, key and check", [2]string{}},
		// An empty check is not "every check": a client sending the field
		// from an unset variable would cancel them all.
		{"cancel with an empty check", "POST", "/v1/cancel", `{"entity": "order", "key": "42", "check": ""}`, nil,
			400, "check", "check is empty: name the check to cancel, or leave the field out", [2]string{}},
		// Nor is a null one (found by a new user's trial: Python's None
		// cancelled every check of the entity).
		{"cancel with a null check", "POST", "/v1/cancel", `{"entity": "order", "key": "42", "check": null}`, nil,
			400, "check", "check is null: name the check to cancel, or leave the field out", [2]string{}},
		{"cancel with a number for check", "POST", "/v1/cancel", `{"entity": "order", "key": "42", "check": 5}`, nil,
			400, "check", "check must be a string, not a number", [2]string{}},
		// null where a name is required says so (it was reported as an
		// empty or invalid value: `invalid event name ""`).
		{"resolve with a null event", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": null}`, nil,
			400, "event", "event is null: give it as a string", [2]string{}},
		{"schedule with a null key", "POST", "/v1/schedule", `{"entity": "order", "key": null, "check": "c", "in": "3h"}`, nil,
			400, "key", "key is null: give it as a string", [2]string{}},
		{"unknown field", "POST", "/v1/schedule", sched(`, "in": "3h", "colour": "red"`), nil, 400, "colour",
			`unknown field "colour" (the fields are entity, key, check, at or in, payload and on_conflict)`, [2]string{}},
		// Found by an operator's trial: a dry run that cancelled, a field
		// named in capitals taken for entity, the last of two kept.
		{"query parameter on a POST", "POST", "/v1/cancel?dry_run=true", `{"entity": "order", "key": "42"}`, nil, 400, "dry_run",
			`unknown query parameter "dry_run" (this route takes none)`, [2]string{}},
		{"field in capitals", "POST", "/v1/schedule", `{"Entity": "order", "key": "42", "check": "order_unshipped", "in": "3h"}`, nil, 400, "Entity",
			`unknown field "Entity" (the fields are entity, key, check, at or in, payload and on_conflict, written so: names are case-sensitive)`, [2]string{}},
		{"field twice", "POST", "/v1/schedule", sched(`, "in": "1h", "in": "2h"`), nil, 400, "in", "in is given twice: give it once", [2]string{}},
		{"event twice", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped", "event": "paid"}`, nil,
			400, "event", "event is given twice", [2]string{}},
		{"trailing object", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped"} {"entity": "order"}`, nil,
			400, "", "the body holds more after its JSON object", [2]string{}},
		{"trailing garbage", "POST", "/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped"}x`, nil,
			400, "", "the body holds more after its JSON object", [2]string{}},
		{"at no real time", "POST", "/v1/schedule", sched(`, "at": "2030-02-30T10:00:00Z"`), nil, 400, "at", `at "2030-02-30T10:00:00Z" is no real time: day out of range`, [2]string{}},
		{"key a number", "POST", "/v1/schedule", `{"entity": "order", "key": 42, "check": "c", "in": "3h"}`, nil, 400, "key", "key must be a string, not a number", [2]string{}},
		// Text that is not UTF-8, which encoding/json would read as U+FFFD:
		// "\xff" and "\udfff" named the same job, so a cancel of one
		// cancelled the other (found by a trial of bad input).
		{"key not UTF-8", "POST", "/v1/schedule", "{\"entity\": \"order\", \"key\": \"4\xff2\", \"check\": \"c\", \"in\": \"3h\"}", nil,
			400, "key", "key holds bytes that are not UTF-8", [2]string{}},
		{"key a lone low surrogate", "POST", "/v1/cancel", `{"entity": "order", "key": "\udfff"}`, nil,
			400, "key", `key holds a lone UTF-16 surrogate escape (\udfff)`, [2]string{}},
		{"key a lone high surrogate", "POST", "/v1/schedule", `{"entity": "order", "key": "4\ud800", "check": "c", "in": "3h"}`, nil,
			400, "key", "key holds a lone UTF-16 surrogate escape (a high one not followed by a low one)", [2]string{}},
		{"key two high surrogates", "POST", "/v1/schedule", `{"entity": "order", "key": "\ud800\ud801\udc00", "check": "c", "in": "3h"}`, nil,
			400, "key", `key holds a lone UTF-16 surrogate escape (before \ud801)`, [2]string{}},
		{"event not UTF-8", "POST", "/v1/resolve", "{\"entity\": \"order\", \"key\": \"42\", \"event\": \"sh\xc3ipped\"}", nil,
			400, "event", "event holds bytes that are not UTF-8", [2]string{}},
		{"payload with a lone surrogate", "POST", "/v1/schedule", sched(`, "in": "3h", "payload": {"note": "\udc00"}`), nil,
			400, "payload", "payload holds a lone UTF-16 surrogate escape", [2]string{}},

		// 400: the values, named by field.
		{"no entity", "POST", "/v1/schedule", `{"key": "42", "check": "c", "in": "3h"}`, nil, 400, "entity", "entity is missing: give it as a string", [2]string{}},
		{"bad entity", "POST", "/v1/cancel", `{"entity": "-order", "key": "42"}`, nil, 400, "entity", `invalid entity name "-order"`, [2]string{}},
		{"no key", "POST", "/v1/resolve", `{"entity": "order", "event": "shipped"}`, nil, 400, "key", "key is missing: give it as a string (the fields are entity, key and event)", [2]string{}},
		{"empty key", "POST", "/v1/resolve", `{"entity": "order", "key": "", "event": "shipped"}`, nil, 400, "key", "entity order: key must be 1 to 512 bytes, got 0", [2]string{}},
		{"long key", "POST", "/v1/schedule", `{"entity": "order", "key": "` + strings.Repeat("k", 513) + `", "check": "c", "in": "3h"}`, nil,
			400, "key", "key must be 1 to 512 bytes, got 513", [2]string{}},
		{"control in key", "POST", "/v1/schedule", `{"entity": "order", "key": "4\n2", "check": "c", "in": "3h"}`, nil,
			400, "key", "key has U+000A, a control character, at character 2", [2]string{}},
		{"no check", "POST", "/v1/schedule", `{"entity": "order", "key": "42", "in": "3h"}`, nil, 400, "check", "check is missing", [2]string{}},
		// A misspelt check: its job would wait for a server that never comes.
		{"unknown check", "POST", "/v1/schedule", `{"entity": "order", "key": "42", "check": "order_unshiped", "in": "3h"}`, nil,
			400, "check", `no server runs a check named "order_unshiped" (known checks: `, [2]string{}},
		{"another entity than the check's", "POST", "/v1/schedule", `{"entity": "order", "key": "42", "check": "invoice_unsent", "in": "3h"}`, nil,
			400, "entity", "order/42/invoice_unsent: wrong entity for the check: check invoice_unsent watches entity invoice only", [2]string{}},
		{"no time", "POST", "/v1/schedule", sched(``), nil, 400, "at", "say when to check: at (an RFC 3339 time", [2]string{}},
		{"at and in", "POST", "/v1/schedule", sched(`, "at": "2030-01-01T00:00:00Z", "in": "3h"`), nil, 400, "in", "both say when to check: give only one", [2]string{}},
		{"at not RFC 3339", "POST", "/v1/schedule", sched(`, "at": "2030-01-01 10:00"`), nil, 400, "at", `at "2030-01-01 10:00" is not an RFC 3339 time`, [2]string{}},
		{"in not a duration", "POST", "/v1/schedule", sched(`, "in": "3 hours"`), nil, 400, "in", `in "3 hours" is not a Go duration of 0 or more`, [2]string{}},
		{"in negative", "POST", "/v1/schedule", sched(`, "in": "-1h"`), nil, 400, "in", `in "-1h" is not a Go duration of 0 or more`, [2]string{}},
		{"at after the range", "POST", "/v1/schedule", sched(`, "at": "2300-01-01T00:00:00Z"`), nil,
			400, "at", "time 2300-01-01T00:00:00Z is outside the supported range [1970-01-01T00:00:00Z, 2200-01-01T00:00:00Z)", [2]string{}},
		{"at rounding out of the range", "POST", "/v1/schedule", sched(`, "at": "2199-12-31T23:59:59Z"`), nil,
			400, "at", "rounds up to the slot 2200-01-01T00:00:00Z, outside the supported range", [2]string{}},
		{"at in year 1", "POST", "/v1/schedule", sched(`, "at": "0001-01-01T00:00:00Z"`), nil,
			400, "at", "order/42/order_unshipped: time 0001-01-01T00:00:00Z is outside the supported range", [2]string{}},
		{"at before 1970", "POST", "/v1/schedule", sched(`, "at": "1969-12-31T23:59:59Z"`), nil, 400, "at", "outside the supported range", [2]string{}},
		{"in beyond the range", "POST", "/v1/schedule", sched(`, "in": "2000000h"`), nil, 400, "in", "outside the supported range", [2]string{}},
		{"payload with NUL", "POST", "/v1/schedule", sched(`, "in": "3h", "payload": {"a": "\u0000"}`), nil,
			400, "payload", `payload holds \u0000 at offset`, [2]string{}},
		{"payload too deep", "POST", "/v1/schedule", sched(`, "in": "3h", "payload": ` + strings.Repeat("[", 65) + strings.Repeat("]", 65)), nil,
			400, "payload", "payload nests arrays and objects more than 64 levels deep", [2]string{}},
		{"payload too large", "POST", "/v1/schedule", sched(`, "in": "3h", "payload": "` + strings.Repeat("x", prescient.PayloadMax) + `"`), nil,
			400, "payload", "more than the 65536 allowed", [2]string{}},
		{"on_conflict merge", "POST", "/v1/schedule", sched(`, "in": "3h", "on_conflict": "merge"`), nil,
			400, "on_conflict", `on_conflict "merge" is not a conflict rule (want replace or keep)`, [2]string{}},
		{"cancel bad check", "POST", "/v1/cancel", `{"entity": "order", "key": "42", "check": "a b"}`, nil, 400, "check", `invalid check name "a b"`, [2]string{}},
		{"resolve no event", "POST", "/v1/resolve", `{"entity": "order", "key": "42"}`, nil, 400, "event", "event is missing", [2]string{}},
		{"jobs bad entity", "GET", "/v1/jobs/-order/42", nil, nil, 400, "entity", `invalid entity name "-order"`, [2]string{}},
		{"jobs empty key", "GET", "/v1/jobs/order/", nil, nil, 400, "key", "key must be 1 to 512 bytes, got 0", [2]string{}},
		{"jobs control in key", "GET", "/v1/jobs/order/4%0A2", nil, nil, 400, "key", "key has U+000A, a control character", [2]string{}},
		{"jobs query", "GET", "/v1/jobs/order/42?limit=3", nil, nil, 400, "limit", `unknown query parameter "limit" (this route takes none)`, [2]string{}},
		{"history unknown parameter", "GET", "/v1/history?state=done", nil, nil, 400, "state",
			`unknown query parameter "state" (the parameters are entity, key, check, outcome, since, until, after_at, after_id, limit)`, [2]string{}},
		{"history key alone", "GET", "/v1/history?key=42", nil, nil, 400, "key", `key "42" needs entity`, [2]string{}},
		{"history bad outcome", "GET", "/v1/history?outcome=lost", nil, nil, 400, "outcome", `unknown outcome "lost" (want one of done, resolved`, [2]string{}},
		{"history bad since", "GET", "/v1/history?since=yesterday", nil, nil, 400, "since", `since "yesterday" is neither an RFC 3339 time`, [2]string{}},
		{"history bad until", "GET", "/v1/history?until=-1h", nil, nil, 400, "until", `until "-1h" is neither`, [2]string{}},
		{"history since after until", "GET", "/v1/history?since=1h&until=2h", nil, nil, 400, "until",
			"since 2026-03-10T08:00:00Z is not before until 2026-03-10T07:00:00Z", [2]string{}},
		{"history limit 0", "GET", "/v1/history?limit=0", nil, nil, 400, "limit", `limit "0" is not a whole number from 1 to 100000 (default 100)`, [2]string{}},
		{"history limit too large", "GET", "/v1/history?limit=100001", nil, nil, 400, "limit", "is not a whole number from 1 to 100000", [2]string{}},
		{"history limit not a number", "GET", "/v1/history?limit=ten", nil, nil, 400, "limit", `limit "ten"`, [2]string{}},
		{"history entity twice", "GET", "/v1/history?entity=order&entity=payout", nil, nil, 400, "entity", "entity is given 2 times: give it once", [2]string{}},
		{"history bad query", "GET", "/v1/history?entity=%zz", nil, nil, 400, "", "the query string is not valid", [2]string{}},
	}
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		for _, tt := range tests {
			body := tt.body
			if _, ok := body.(chunkedBig); ok {
				// A reader of unknown length: sent chunked, without a
				// Content-Length to refuse it by.
				body = io.MultiReader(strings.NewReader(big))
			}
			res := e.do(tt.method, tt.path, body, tt.edit...)
			var eb errorBody
			if err := json.Unmarshal(res.body, &eb); err != nil {
				t.Errorf("%s: body %s is not JSON: %v", tt.name, res.body, err)
				continue
			}
			field := ""
			if eb.Field != nil {
				field = *eb.Field
				if field == "" {
					t.Errorf("%s: body %s has an empty field, want it left out", tt.name, res.body)
				}
			}
			if res.status != tt.status || field != tt.field || !strings.Contains(eb.Error, tt.want) {
				t.Errorf("%s: %s %s: %d %s\nwant %d, field %q, error containing %q", tt.name, tt.method, tt.path, res.status, res.body, tt.status, tt.field, tt.want)
			}
			if k := tt.header[0]; k != "" && res.header.Get(k) != tt.header[1] {
				t.Errorf("%s: header %s %q, want %q", tt.name, k, res.header.Get(k), tt.header[1])
			}
		}
		// Nothing bad was scheduled.
		var list struct{ Jobs []job }
		e.ok(http.StatusOK, "GET", "/v1/jobs/order/42", nil, &list)
		if len(list.Jobs) != 0 {
			t.Errorf("bad requests scheduled %+v", list.Jobs)
		}
	})
}

// TestAPINoTokenRefusesAll: a handler built without a token refuses every
// request, whatever it carries.
func TestAPINoTokenRefusesAll(t *testing.T) {
	t.Parallel()
	eachStore(t, &httpapi.Opts{}, func(t *testing.T, e *apiEnv) {
		for _, auth := range []string{"", "Bearer ", "Bearer " + token, "Bearer  "} {
			res := e.do("GET", "/v1/history", nil, func(r *http.Request) { r.Header.Set("Authorization", auth) })
			if res.status != http.StatusUnauthorized {
				t.Errorf("Authorization %q to a handler without a token: %d %s, want 401", auth, res.status, res.body)
			}
		}
	})
}

// TestAPIStoreFailure: when the store fails the answer is a 5xx that names
// the call, and neither the database's URL, user, host, schema nor file;
// the server's log has the error.
func TestAPIStoreFailure(t *testing.T) {
	t.Parallel()
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		e.store.Close()
		for _, r := range []struct {
			method, path string
			body         any
			op           string
		}{
			{"POST", "/v1/schedule", map[string]string{"entity": "order", "key": "42", "check": "order_unshipped", "in": "3h"}, "schedule"},
			{"POST", "/v1/cancel", map[string]string{"entity": "order", "key": "42"}, "cancel"},
			{"POST", "/v1/resolve", map[string]string{"entity": "order", "key": "42", "event": "shipped"}, "resolve"},
			{"GET", "/v1/jobs/order/42", nil, "jobs"},
			{"GET", "/v1/history?entity=order", nil, "history"},
		} {
			res := e.do(r.method, r.path, r.body)
			var eb errorBody
			if err := json.Unmarshal(res.body, &eb); err != nil {
				t.Fatalf("%s %s: body %s: %v", r.method, r.path, res.body, err)
			}
			want := r.op + " failed: the store failed (details in the server's log)"
			if res.status != http.StatusInternalServerError || eb.Error != want || eb.Field != nil {
				t.Errorf("%s %s with the store closed: %d %s, want 500 %q", r.method, r.path, res.status, res.body, want)
			}
			for _, s := range e.secrets {
				if strings.Contains(string(res.body), s) {
					t.Errorf("%s %s: the answer %s tells %q", r.method, r.path, res.body, s)
				}
			}
		}
		if n := strings.Count(e.log.String(), "api: store failed"); n != 5 {
			t.Errorf("the log has %d store failures, want 5:\n%s", n, e.log.String())
		}
	})
}

// TestAPITimeout: a request whose store work outlasts Opts.Timeout is
// answered 503. A timeout of 1ns has passed before the store is asked.
func TestAPITimeout(t *testing.T) {
	t.Parallel()
	eachStore(t, &httpapi.Opts{Token: token, Timeout: time.Nanosecond}, func(t *testing.T, e *apiEnv) {
		res := e.do("GET", "/v1/jobs/order/42", nil)
		var eb errorBody
		if err := json.Unmarshal(res.body, &eb); err != nil {
			t.Fatal(err)
		}
		if res.status != http.StatusServiceUnavailable || !strings.Contains(eb.Error, "jobs failed: the store did not answer within 1ns; try again") {
			t.Errorf("GET /v1/jobs with a 1ns timeout: %d %s, want 503 saying the store did not answer in time", res.status, res.body)
		}
	})
}

// TestAPIMaxBody: Opts.MaxBody caps the body; one byte under passes.
func TestAPIMaxBody(t *testing.T) {
	t.Parallel()
	body := `{"entity": "order", "key": "42", "event": "shipped"}`
	eachStore(t, &httpapi.Opts{Token: token, MaxBody: int64(len(body))}, func(t *testing.T, e *apiEnv) {
		if res := e.do("POST", "/v1/resolve", body); res.status != http.StatusOK {
			t.Errorf("a body of exactly MaxBody bytes: %d %s, want 200", res.status, res.body)
		}
		if res := e.do("POST", "/v1/resolve", body+" "); res.status != http.StatusRequestEntityTooLarge {
			t.Errorf("a body of MaxBody+1 bytes: %d %s, want 413", res.status, res.body)
		}
	})
}

// TestAPIAllowUnknownChecks: with Opts.AllowUnknownChecks a check no server
// has recorded yet is scheduled, for servers that start after the first jobs.
func TestAPIAllowUnknownChecks(t *testing.T) {
	t.Parallel()
	eachStore(t, &httpapi.Opts{Token: token, AllowUnknownChecks: true}, func(t *testing.T, e *apiEnv) {
		res := e.do("POST", "/v1/schedule", `{"entity": "order", "key": "42", "check": "invoice_unpaid", "in": "3h"}`)
		if res.status != http.StatusCreated {
			t.Errorf("a check no server knows, with AllowUnknownChecks: %d %s, want 201", res.status, res.body)
		}
	})
}

// TestAPIStalledBody: a client that stops sending its body halfway, past the
// server's read timeout, gets 408 saying the body did not arrive in time,
// not a 400 about a field.
func TestAPIStalledBody(t *testing.T) {
	t.Parallel()
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		srv := httptest.NewUnstartedServer(httpapi.New(e.client, &httpapi.Opts{Token: token}))
		srv.Config.ReadTimeout = 300 * time.Millisecond
		srv.Start()
		t.Cleanup(srv.Close)
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := `{"entity": "order", "key": "42", "event": "shipped"}`
		half := body[:len(body)/2]
		if _, err := fmt.Fprintf(conn, "POST /v1/resolve HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", token, len(body), half); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		got, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(got), "the body did not arrive in time") {
			t.Errorf("a body stalled past the read timeout: %d %s, want 408 saying the body did not arrive in time", res.StatusCode, got)
		}
	})
}
