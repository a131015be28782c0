package cli

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/sqlite"
)

// TestStatusPageWaitsForTheClient: until run has started its client the
// page answers 503 "starting"; then it is the client's status page.
func TestStatusPageWaitsForTheClient(t *testing.T) {
	t.Parallel()
	ready := &startupReadier{}
	mux := http.NewServeMux()
	mountStatusPage(mux, ready, slog.New(slog.NewTextHandler(io.Discard, nil)))
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get("/"); code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "starting") {
		t.Errorf("GET / before the client started: %d %q, want 503 starting", code, body)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "page.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	client, err := prescient.NewClient(st, &prescient.Config{Server: "page-unit"})
	if err != nil {
		t.Fatal(err)
	}
	ready.started(client)
	if code, body := get("/"); code != http.StatusOK || !strings.Contains(body, `<b id="server-name">page-unit</b>`) {
		t.Errorf("GET / once started: %d, want 200 and the page of page-unit:\n%s", code, body)
	}
	if code, _ := get("/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope: %d, want 404", code)
	}
}

// TestRunServesStatusPage runs the real `prescient run` with http.listen on
// each store and reads the status page over HTTP next to /healthz, /readyz
// and /metrics: the jobs scheduled with the CLI in their upcoming slot, this
// server live, the check no server knows.
func TestRunServesStatusPage(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			extra := "server: page-test\nslots: {resolution: 1s, cycle: 0s}\nhttp:\n  listen: " + addr + "\n"
			var h *harness
			if store == "sqlite" {
				h = &harness{t: t, env: map[string]string{},
					config: writeConfig(t, "database:\n  path: "+filepath.Join(t.TempDir(), "jobs.db")+"\n"+extra)}
			} else {
				h, _, _ = dbHarness(t, extra)
			}
			h.mustRun("migrate")
			slot := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
			at := slot.Format(time.RFC3339)
			h.mustRun("schedule", "order", "1", "order_unshipped", "--at", at)
			h.mustRun("schedule", "order", "2", "order_unshipped", "--at", at)
			h.mustRun("schedule", "invoice", "7", "mystery", "--at", at)

			srv := startRun(t, h)
			c := http.Client{Timeout: 10 * time.Second}
			fetch := func(path string) (int, string) {
				resp, err := c.Get("http://" + addr + path)
				if err != nil {
					return 0, err.Error()
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var body string
			waitFor(t, 60*time.Second, "the status page served", srv, func() bool {
				var code int
				code, body = fetch("/?refresh=0")
				if code != 0 && code != http.StatusOK && !(code == http.StatusServiceUnavailable && strings.HasPrefix(body, "starting")) {
					t.Fatalf("GET / while starting: %d %q, want 503 starting or 200", code, body)
				}
				return code == http.StatusOK && strings.Contains(body, `data-state="done"`)
			})
			i := strings.Index(body, `data-slot="`+slot.Format(time.RFC3339Nano)+`"`)
			if i < 0 {
				t.Fatalf("the page has no row for the slot %s:\n%s", at, body)
			}
			wantContains(t, "upcoming slot", body[i:i+strings.Index(body[i:], "</tr>")], `<td class="num jobs">3</td>`, "page-test")
			wantContains(t, "page", body,
				`<tr class="server" data-server="page-test">`, `this server`, `<span class="state live">live</span>`,
				`<tr class="unknown-check" data-check="mystery">`, `<tr class="check" data-check="order_unshipped">`)
			if code, body := fetch("/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Errorf("/healthz beside the page: %d %q", code, body)
			}
			if code, body := fetch("/readyz"); code != http.StatusOK || body != "ready\n" {
				t.Errorf("/readyz beside the page: %d %q", code, body)
			}
			if code, body := fetch("/metrics"); code != http.StatusOK || strings.Contains(body, "<html") {
				t.Errorf("/metrics beside the page: %d, want the metrics, not a page:\n%.300s", code, body)
			}
			if code, _ := fetch("/nope"); code != http.StatusNotFound {
				t.Errorf("/nope: %d, want 404", code)
			}
			srv.cancel()
			<-srv.exit
			if srv.err != nil {
				t.Errorf("run: %v", srv.err)
			}
		})
	}
}
