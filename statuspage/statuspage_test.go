package statuspage

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
)

// row returns the table row of body whose opening tag holds attr, tags and
// all, or fails the test.
func row(t *testing.T, body, attr string) string {
	t.Helper()
	i := strings.Index(body, attr)
	if i < 0 {
		t.Fatalf("no row with %s in the page:\n%s", attr, body)
	}
	start := strings.LastIndex(body[:i], "<tr")
	end := strings.Index(body[i:], "</tr>")
	if start < 0 || end < 0 {
		t.Fatalf("%s is not in a table row:\n%s", attr, body)
	}
	return body[start : i+end]
}

// text is s with its tags dropped, entities decoded and spaces squeezed.
func text(s string) string {
	s = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(s, " ")
	return strings.Join(strings.Fields(html.UnescapeString(s)), " ")
}

func wantText(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q does not contain %q", what, got, w)
		}
	}
}

func iso(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// TestPages reads each page over HTTP from a client with real jobs, on each
// store, and checks what it says.
func TestPages(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			srv := f.serve(t, &Opts{CacheFor: -1})

			code, hdr, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d\n%s", code, body)
			}
			if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "style-src 'self'") {
				t.Errorf("Content-Security-Policy %q: want nothing but the page's own stylesheet", csp)
			}
			if !strings.Contains(body, `<meta http-equiv="refresh" content="15">`) {
				t.Errorf("the overview does not reload itself every 15s (RefreshDefault):\n%s", body)
			}
			wantText(t, "summary", text(between(t, body, `id="summary"`, "</section>")),
				"Pending 12", "Overdue 1", "oldest 2031-03-04 10:01:00", "Unknown checks 3", "Finished, last 24 h 5",
				"done 3", "cancelled 1", "failed 1", "Incomplete slots 1")
			wantText(t, "counts", text(body), "Counts as of 10:02:30 UTC")

			// The timeline: upcoming slots with their jobs and owner, then
			// the fired ones with lag, duration and outcomes.
			wantText(t, "slot 10:05", text(row(t, body, `data-slot="`+iso(slot1005)+`"`)), "10:05:00", "upcoming", "9", "web-1", "in 2m30s", "9 due")
			wantText(t, "slot 10:03", text(row(t, body, `data-slot="`+iso(slot1003)+`"`)), "upcoming", "1 due")
			wantText(t, "slot 10:11", text(row(t, body, `data-slot="`+iso(slot1011)+`"`)), "upcoming", "1 due")
			r1001 := text(row(t, body, `data-slot="`+iso(slot1001)+`"`))
			wantText(t, "slot 10:01", r1001, "done", "5", "web-1", "2s", "done 3", "again later 1", "failures 1", "unknown 1")
			wantText(t, "slot 10:02", text(row(t, body, `data-slot="`+iso(slot1002)+`"`)), "done", "2", "3s", "failed 1", "failures 2")
			wantText(t, "slot 10:00", text(row(t, body, `data-slot="`+iso(slot1000)+`"`)), "done", "500ms", "no jobs")
			r0958 := row(t, body, `data-slot="`+iso(slot0958)+`"`)
			if !strings.Contains(r0958, `class="slot incomplete"`) {
				t.Errorf("slot 09:58, started by a dead server and never finished, is not highlighted incomplete: %s", r0958)
			}
			wantText(t, "slot 09:58", text(r0958), "incomplete", "web-2", "1s", "—")
			if i, j := strings.Index(body, iso(slot1005)), strings.Index(body, iso(slot1001)); i > j || !strings.Contains(body[i:j], "now 10:02:30") {
				t.Errorf("the timeline does not read upcoming, now, then fired")
			}

			// Servers: web-1 live (this server), web-2 gone.
			wantText(t, "web-1", text(row(t, body, `data-server="web-1"`)), "web-1", "this server", "live", "3s ago", "4: 0–3")
			wantText(t, "web-2", text(row(t, body, `data-server="web-2"`)), "gone", "4m10s ago", "2: 1, 3")

			// Pending per check, and the unknown check.
			wantText(t, "greet", text(row(t, body, `class="check" data-check="greet"`)), "greet", "7", "this server")
			wantText(t, "again", text(row(t, body, `class="check" data-check="again"`)), "1", "shipped", "this server")
			wantText(t, "mystery", text(row(t, body, `class="check" data-check="mystery"`)), "3", "no server")
			wantText(t, "unknown mystery", text(row(t, body, `class="unknown-check" data-check="mystery"`)),
				"mystery", "3", "not in the catalog", "found 1 due job(s)")
			if strings.Contains(body, `class="unknown-check" data-check="greet"`) {
				t.Errorf("greet, a registered check, is listed as unknown")
			}

			// Recent history, escaped.
			wantText(t, "recent", text(between(t, body, `id="recent"`, "</section>")), "failed", oddKey, "cancelled", "done")
			for _, raw := range []string{"<b>boom</b>", `<script>alert("error")`, "<x>"} {
				if strings.Contains(body, raw) {
					t.Errorf("the overview holds %q unescaped", raw)
				}
			}
		})
	}
}

// between returns what lies in body between the first occurrence of from
// and the next of to.
func between(t *testing.T, body, from, to string) string {
	t.Helper()
	i := strings.Index(body, from)
	if i < 0 {
		t.Fatalf("no %s in the page:\n%s", from, body)
	}
	j := strings.Index(body[i:], to)
	if j < 0 {
		t.Fatalf("no %s after %s", to, from)
	}
	return body[i+len(from) : i+j]
}

// TestHistoryAndJobPages filters history and opens one job's page over
// HTTP: the filters select what they say, the job page shows the pending
// row and the history rows, and every value from the store is escaped.
func TestHistoryAndJobPages(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			srv := f.serve(t, nil)

			records := func(body string) []string {
				var out []string
				for _, m := range regexp.MustCompile(`(?s)<tr class="record" data-outcome="([a-z_]+)" data-key="([^"]*)">`).FindAllStringSubmatch(body, -1) {
					out = append(out, m[1]+" "+html.UnescapeString(m[2]))
				}
				return out
			}
			for _, tc := range []struct {
				query string
				want  []string
			}{
				{"", []string{"failed " + oddKey, "done 3", "done 2", "done 1", "cancelled 9"}},
				{"?outcome=failed", []string{"failed " + oddKey}},
				{"?outcome=trouble", []string{"failed " + oddKey}},
				{"?outcome=done&entity=order&key=2", []string{"done 2"}},
				{"?check=greet&limit=2", []string{"done 3", "done 2"}},
				{"?entity=invoice", nil},
			} {
				code, _, body := get(t, srv, "/history"+tc.query)
				got := records(body)
				if code != http.StatusOK || strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("/history%s: %d %q, want 200 %q", tc.query, code, got, tc.want)
				}
				if more := strings.Contains(body, `id="history-more"`); more != (tc.query == "?check=greet&limit=2") {
					t.Errorf("/history%s: says more rows exist: %v", tc.query, more)
				}
			}
			_, _, body := get(t, srv, "/history?outcome=failed")
			if !strings.Contains(body, `<option value="failed" selected>`) {
				t.Errorf("the outcome filter does not show the outcome chosen")
			}
			for _, tc := range []struct{ query, want string }{
				{"?outcome=lost", `unknown outcome "lost"`},
				{"?key=42", "A key needs an entity"},
				{"?limit=0", "must be a number from 1 to 1000"},
				// Names no job can have: the visitor's mistake, not the
				// store's ("Could not read history", and a warning logged).
				{"?entity=bad%20name", `invalid entity name "bad name"`},
				{"?entity=order&key=4%E2%80%8B2", "key has U+200B"},
				{"?check=a%0Ab", "invalid check name"},
			} {
				code, _, body := get(t, srv, "/history"+tc.query)
				if code != http.StatusBadRequest || !strings.Contains(text(body), tc.want) {
					t.Errorf("/history%s: %d, want 400 saying %q:\n%s", tc.query, code, tc.want, text(body))
				}
			}

			// A job that ended: no pending row, its history records with
			// the error and the payload as text.
			q := url.Values{"entity": {"order"}, "key": {oddKey}, "check": {"flaky"}}
			code, _, body := get(t, srv, "/job?"+q.Encode())
			if code != http.StatusOK {
				t.Fatalf("/job?%s: %d\n%s", q.Encode(), code, body)
			}
			wantText(t, "ended job", text(body), "Job order · "+oddKey+" · flaky", "This job is not pending.",
				"failed", "Failures in a row 2", "Last error or reason "+boom, `"note": "<script>alert(1)</script>"`)
			for _, raw := range []string{"<b>boom</b>", "<script>", "<x>"} {
				if strings.Contains(body, raw) {
					t.Errorf("the job page holds %q unescaped", raw)
				}
			}
			// The link from a history row leads to this page.
			_, _, hist := get(t, srv, "/history?outcome=failed")
			m := regexp.MustCompile(`<td class="mono"><a href="job\?([^"]*)">`).FindStringSubmatch(hist)
			if m == nil {
				t.Fatalf("the history row has no link to its job:\n%s", hist)
			}
			if link, err := url.ParseQuery(html.UnescapeString(m[1])); err != nil || link.Encode() != q.Encode() {
				t.Errorf("the history row links to job?%s, want job?%s", html.UnescapeString(m[1]), q.Encode())
			}

			// A pending job that failed once.
			_, _, body = get(t, srv, "/job?entity=order&key=7&check=flaky")
			wantText(t, "pending job", text(between(t, body, `id="pending"`, "</section>")), "flaky", "due 2031-03-04 10:03:00",
				"1 failure(s) in a row", "Last error "+boom, `"amount": 12`, `"note": "<i>tip</i>"`)
			wantText(t, "pending job", text(between(t, body, `id="job-history"`, "</section>")), "No history record.")
			// Every check of an entity key, pending and finished.
			_, _, body = get(t, srv, "/job?entity=order&key=9")
			wantText(t, "order 9", text(body), "No job of order 9 is pending.", "greet", "cancelled", "by api")
			// What the page cannot look up.
			for _, path := range []string{"/job", "/job?entity=order", "/job?entity=bad%20name&key=1"} {
				if code, _, _ := get(t, srv, path); code != http.StatusBadRequest {
					t.Errorf("%s: %d, want 400", path, code)
				}
			}
		})
	}
}

// TestRoutes: the page answers GET on its own paths only, 404 elsewhere
// (so that a mux can give /healthz or /metrics to other handlers), refuses
// writes, and serves its stylesheet from the binary.
func TestRoutes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, stores[1].open(t))
	srv := f.serve(t, nil)
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/", 200, "Timeline"},
		{"/?refresh=0", 200, "Auto-refresh paused"},
		{"/history", 200, "History"},
		{"/static/style.css", 200, "--accent"},
		{"/healthz", 404, "There is no page at /healthz."},
		{"/a/b/c", 404, `href="../../static/style.css"`},
		{"/static/nope.css", 404, ""},
	} {
		code, hdr, body := get(t, srv, tc.path)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want %d with %q:\n%s", tc.path, code, tc.code, tc.want, body)
		}
		if tc.path == "/static/style.css" && !strings.HasPrefix(hdr.Get("Content-Type"), "text/css") {
			t.Errorf("GET %s: Content-Type %q", tc.path, hdr.Get("Content-Type"))
		}
	}
	if _, _, body := get(t, srv, "/?refresh=0"); strings.Contains(body, `http-equiv="refresh"`) {
		t.Errorf("/?refresh=0 still reloads itself")
	}
	for _, path := range []string{"/", "/history", "/job?entity=order&key=1"} {
		resp, err := srv.Client().Post(srv.URL+path, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("POST %s: %d, want 405", path, resp.StatusCode)
		}
	}
}

// TestCountsCached: the counts are read once per CacheFor whatever the
// loads, and the page says when they were read. A load after CacheFor shows
// the last reading at once while a new one is read in the background; a
// load after staleMax waits for the new reading.
func TestCountsCached(t *testing.T) {
	t.Parallel()
	f := newFixture(t, stores[1].open(t))
	start := time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	cache := &fakeClock{t: start}
	h := New(f.client, &Opts{CacheFor: 10 * time.Second, now: cache.Now})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	pending := func() string {
		t.Helper()
		_, _, body := get(t, srv, "/?refresh=0")
		return text(between(t, body, `id="pending">`, "</div>")) + " | " + text(between(t, body, `id="counts-asof">`, "</span>"))
	}
	schedule := func(key string, now time.Time) {
		t.Helper()
		f.clock.Set(now)
		if _, err := f.client.Schedule(context.Background(), prescient.ScheduleParams{Entity: "order", Key: key, Check: "greet", At: slot1005}); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pending(), "12 | Counts as of 10:02:30 UTC"; got != want {
		t.Fatalf("first load: %q, want %q", got, want)
	}
	schedule("99", pageNow.Add(5*time.Second))
	cache.Set(start.Add(10*time.Second - time.Nanosecond))
	if got, want := pending(), "12 | Counts as of 10:02:30 UTC"; got != want {
		t.Errorf("within CacheFor: %q, want the first reading %q", got, want)
	}
	cache.Set(start.Add(10 * time.Second))
	if got, want := pending(), "12 | Counts as of 10:02:30 UTC"; got != want {
		t.Errorf("the load that starts a new reading: %q, want the last reading %q at once", got, want)
	}
	p := h.(*page)
	p.countsMu.Lock()
	reading := p.reading
	p.countsMu.Unlock()
	if reading != nil {
		select {
		case <-reading:
		case <-time.After(30 * time.Second):
			t.Fatal("the background reading of the counts did not end")
		}
	}
	if got, want := pending(), "13 | Counts as of 10:02:35 UTC"; got != want {
		t.Errorf("once the background reading ended: %q, want it, %q", got, want)
	}
	schedule("98", pageNow.Add(10*time.Second))
	cache.Set(start.Add(10*time.Second + staleMax))
	if got, want := pending(), "14 | Counts as of 10:02:40 UTC"; got != want {
		t.Errorf("a reading staleMax old: %q, want the load to wait for a new one, %q", got, want)
	}
}

// A check this server found due and does not run stays listed as unknown
// while its jobs are pending. Once they were cancelled the page still listed
// it, from what the server had found in its last slot with any (the last
// note's "UnknownChecks stale"), though nothing waited on it any more.
func TestUnknownCheckGoneOnceItsJobsAre(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			for _, e := range [][2]string{{"order", "5"}, {"invoice", "1"}, {"invoice", "2"}} {
				if _, err := f.client.Cancel(context.Background(), e[0], e[1], "mystery"); err != nil {
					t.Fatal(err)
				}
			}
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d\n%s", code, body)
			}
			if strings.Contains(body, `class="unknown-check" data-check="mystery"`) {
				t.Errorf("mystery, whose jobs were all cancelled, is still listed as an unknown check:\n%s",
					text(between(t, body, "<h2>Unknown checks</h2>", "</section>")))
			}
			wantText(t, "summary", text(between(t, body, `id="summary"`, "</section>")), "Unknown checks 0")
			// Nor in "Pending by check", where it stayed, 0 pending and run by
			// no server, until the server restarted (found by an operator's
			// trial, after `prescient checks retire`).
			if strings.Contains(body, `class="check" data-check="mystery"`) {
				t.Errorf("mystery, whose jobs were all cancelled, is still listed among the checks:\n%s", text(row(t, body, `class="check" data-check="mystery"`)))
			}
		})
	}
}

// A check in the catalog (a server registered it once) that this server
// found due and does not run: "Pending by check" said "another server" runs
// it while "Unknown checks" listed it as found due here and not run, the
// same page contradicting itself (found by a new user's trial, after
// removing a declared check from the configuration).
func TestCatalogedCheckFoundDueHereIsNotRunByAnotherServer(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, st.open(t))
			must(t, f.drv.CatalogSave(context.Background(), []driver.CatalogEntry{{Check: "mystery"}}))
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d\n%s", code, body)
			}
			r := text(row(t, body, `class="check" data-check="mystery"`))
			wantText(t, "mystery", r, "not this server")
			if strings.Contains(r, "another server") {
				t.Errorf("mystery, found due here and run by no server, is said to be run by another server: %s", r)
			}
			wantText(t, "greet", text(row(t, body, `class="check" data-check="greet"`)), "this server")
		})
	}
}
