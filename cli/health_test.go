package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prescient-dev/prescient"
)

type fakeReadier struct{ err error }

func (f *fakeReadier) Ready() error { return f.err }

// TestReadyzHidesDatabaseDetails: /readyz tells any caller that the database
// is unreachable, not its user, name or address; the server's log has them.
func TestReadyzHidesDatabaseDetails(t *testing.T) {
	dbErr := errors.New("prescient: heartbeat: list servers: failed to connect to `user=app_owner database=orders_prod`: 10.1.2.3:5432 (db.internal): dial error: connection refused")
	client := &fakeReadier{err: dbErr}
	var log bytes.Buffer
	h := healthHandler(client, slog.New(slog.NewTextHandler(&log, nil)))
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}

	code, body := get("/readyz")
	if code != http.StatusServiceUnavailable || body != "not ready: database unreachable (details in the server's log)\n" {
		t.Errorf("/readyz with the database down: %d %q", code, body)
	}
	for _, detail := range []string{"app_owner", "orders_prod", "10.1.2.3", "5432", "db.internal"} {
		if strings.Contains(body, detail) {
			t.Errorf("/readyz body %q tells %q", body, detail)
		}
	}
	get("/readyz")
	if n := strings.Count(log.String(), "10.1.2.3:5432"); n != 1 {
		t.Errorf("the log has the error %d times after two probes, want once:\n%s", n, log.String())
	}

	client.err = nil
	if code, body := get("/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz with the database up: %d %q", code, body)
	}
	if code, body := get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

// servedAddr serves nothing on http.listen listen until the test ends, and
// returns the address it listens on, as its first log line names it.
func servedAddr(t *testing.T, listen string) string {
	t.Helper()
	var logs bytes.Buffer
	stop, err := serveHTTP(listen, http.NotFoundHandler(), slog.New(slog.NewJSONHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var rec struct{ Addr string }
	if err := json.Unmarshal([]byte(strings.SplitN(logs.String(), "\n", 2)[0]), &rec); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	return rec.Addr
}

// TestHTTPListenPortAloneIsLoopback: http.listen ":0" serves loopback only,
// as api.listen does; the page and /metrics show keys and errors.
func TestHTTPListenPortAloneIsLoopback(t *testing.T) {
	addr := servedAddr(t, ":0")
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("http.listen :0 listens on %q, want 127.0.0.1:<port>", addr)
	}
}

// TestHTTPListenBeyondLoopbackWarns: the status page and /metrics have no
// authentication and show jobs' keys, payloads and errors, so serving them
// on every interface is warned of, as an API beyond loopback is; on
// loopback it is not.
func TestHTTPListenBeyondLoopbackWarns(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{{"0.0.0.0:0", true}, {":0", false}, {"127.0.0.1:0", false}} {
		var logs bytes.Buffer
		stop, err := serveHTTP(tc.addr, http.NotFoundHandler(), slog.New(slog.NewJSONHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if got := strings.Contains(logs.String(), `"level":"WARN","msg":"http: serving the status page and /metrics beyond this host, without authentication`); got != tc.warn {
			t.Errorf("http.listen %s: warned %v, want %v; log:\n%s", tc.addr, got, tc.warn, logs.String())
		}
	}
}

// TestReadyzSaysTheSchemaIsNotMigrated: a server waiting for `prescient
// migrate` reaches its database; /readyz says what it waits for.
func TestReadyzSaysTheSchemaIsNotMigrated(t *testing.T) {
	for _, err := range []error{errSchemaBehind, fmt.Errorf("claim: %w", prescient.ErrNotMigrated)} {
		h := healthHandler(&fakeReadier{err: err}, slog.New(slog.DiscardHandler))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code != http.StatusServiceUnavailable || rec.Body.String() != "not ready: the database's schema is not migrated (details in the server's log)\n" {
			t.Errorf("/readyz for %v: %d %q", err, rec.Code, rec.Body.String())
		}
	}
}

// TestHTTPListenHasTheAPIsLimits: the port of the status page and /metrics,
// often open to other hosts without authentication, refuses oversized
// headers as the API's does; without the API's limits it took 1 MiB of
// headers, and a client that announced a body and never sent it, or stayed
// idle, held its connection for ever (found by a security review: 3,000
// such connections, 6,000 goroutines).
func TestHTTPListenHasTheAPIsLimits(t *testing.T) {
	addr := servedAddr(t, "127.0.0.1:0")
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("a", 200<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("200 KiB of headers: %d, want 431 as on the API's port", resp.StatusCode)
	}
	srv := limitedServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	if srv.ReadTimeout != apiReadTimeout || srv.IdleTimeout != apiIdleTimeout || srv.WriteTimeout != apiWriteTimeout || srv.ReadHeaderTimeout != apiReadHeaderTimeout {
		t.Errorf("limitedServer's timeouts: %+v", srv)
	}
}
