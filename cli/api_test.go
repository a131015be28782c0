package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/sqlite"
)

const apiTestToken = "api-test-token-5f1c0e8a9b7d"

// apiLog is the stderr of a running `prescient run` with log.format: json.
// It hands the address of the API to addr as soon as the line that says it
// is serving is written, so that a test waits for exactly that.
type apiLog struct {
	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
	addr    chan string
	sent    bool
}

func newAPILog() *apiLog { return &apiLog{addr: make(chan string, 1)} }

func (l *apiLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all.Write(p)
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(l.partial[:i], &rec) == nil && rec.Msg == "serving api" && !l.sent {
			l.sent = true
			l.addr <- rec.Addr
		}
		l.partial = l.partial[i+1:]
	}
	return len(p), nil
}

func (l *apiLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// apiRun is a `prescient run` running in-process.
type apiRun struct {
	t      *testing.T
	log    *apiLog
	cancel context.CancelFunc
	done   chan error
}

// startAPIRun runs `prescient run` with the order example's checks, the
// environment env and the configuration file config (and run's flags
// args), until stop.
func startAPIRun(t *testing.T, env map[string]string, config string, args ...string) *apiRun {
	t.Helper()
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		t.Fatal(err)
	}
	r := &apiRun{t: t, log: newAPILog(), done: make(chan error, 1)}
	root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: r.log, lookupEnv: envOf(env)})
	root.SetArgs(append([]string{"--config", config, "run"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// addr waits until the API is served and returns its address, or fails
// the test when run returns first.
func (r *apiRun) addr() string {
	r.t.Helper()
	select {
	case a := <-r.log.addr:
		return a
	case err := <-r.done:
		r.done <- err // for the cleanup
		r.t.Fatalf("run returned %v before serving the API; logs:\n%s", err, r.log.String())
	case <-time.After(2 * time.Minute): // a guard against hanging, not a timing
		r.t.Fatalf("run did not serve the API within 2 minutes; logs:\n%s", r.log.String())
	}
	return ""
}

// stop stops run as SIGINT would and returns what it returned.
func (r *apiRun) stop() error {
	r.cancel()
	err := <-r.done
	r.done <- err
	return err
}

// call sends one request to the API at addr with the token.
func call(t *testing.T, method, url string, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiTestToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, raw
}

// TestAPIServedByRun runs the real `prescient run` with api.listen set, on
// SQLite and on PostgreSQL, and goes through a job's life over HTTP:
// scheduled, visible in GET /v1/jobs, resolved, recorded as resolved. Once
// run has stopped, the API answers no more.
func TestAPIServedByRun(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			var h *harness
			// A port without a host is served on loopback only.
			api := "log: {format: json}\napi:\n  listen: \":0\"\n"
			if store == "sqlite" {
				path := filepath.Join(t.TempDir(), "jobs.db")
				h = &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database: {path: "+path+"}\n"+api)}
			} else {
				h, _, _ = dbHarness(t, api)
			}
			h.mustRun("migrate")
			h.env[APITokenEnvDefault] = apiTestToken
			run := startAPIRun(t, h.env, h.config)
			addr := run.addr()
			if !strings.HasPrefix(addr, "127.0.0.1:") {
				t.Errorf("api.listen \":0\" serves on %s, want 127.0.0.1 (loopback)", addr)
			}
			base := "http://" + addr

			status, body := call(t, "POST", base+"/v1/schedule", `{"entity": "order", "key": "42", "check": "order_unshipped", "in": "3h", "payload": {"amount": 12}}`)
			if status != http.StatusCreated || !strings.Contains(string(body), `"check":"order_unshipped"`) {
				t.Fatalf("POST /v1/schedule: %d %s, want 201 and the job", status, body)
			}
			status, body = call(t, "GET", base+"/v1/jobs/order/42", "")
			var list struct {
				Jobs []struct{ Entity, Key, Check string }
			}
			if err := json.Unmarshal(body, &list); status != http.StatusOK || err != nil || len(list.Jobs) != 1 || list.Jobs[0].Check != "order_unshipped" {
				t.Fatalf("GET /v1/jobs/order/42: %d %s (%v), want the order_unshipped job", status, body, err)
			}
			// The server recorded that order_unshipped awaits shipped.
			status, body = call(t, "POST", base+"/v1/resolve", `{"entity": "order", "key": "42", "event": "shipped"}`)
			if status != http.StatusOK || string(body) != "{\"resolved\":1}\n" {
				t.Fatalf("POST /v1/resolve: %d %s, want 200 {\"resolved\":1}", status, body)
			}
			status, body = call(t, "GET", base+"/v1/history?entity=order&key=42", "")
			var recs struct {
				Records []struct {
					Check, Outcome string
					FinishedBy     string `json:"finished_by"`
				}
			}
			if err := json.Unmarshal(body, &recs); status != http.StatusOK || err != nil || len(recs.Records) != 1 {
				t.Fatalf("GET /v1/history: %d %s (%v), want one record", status, body, err)
			}
			if r := recs.Records[0]; r.Check != "order_unshipped" || r.Outcome != "resolved" || r.FinishedBy != "api" {
				t.Errorf("history record %+v, want order_unshipped resolved by the api", r)
			}
			if status, body := call(t, "GET", base+"/v1/jobs/order/42", ""); status != http.StatusOK || string(body) != "{\"jobs\":[]}\n" {
				t.Errorf("GET /v1/jobs/order/42 after resolve: %d %s, want no jobs", status, body)
			}
			// Without the token: 401.
			res, err := http.Post(base+"/v1/cancel", "application/json", strings.NewReader(`{"entity": "order", "key": "42"}`))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST /v1/cancel without the token: %d, want 401", res.StatusCode)
			}

			if err := run.stop(); err != nil {
				t.Fatalf("run: %v\nlogs:\n%s", err, run.log.String())
			}
			if _, err := http.Get(base + "/v1/history"); err == nil {
				t.Errorf("the API still answers after run stopped")
			}
			logs := run.log.String()
			if strings.Contains(logs, apiTestToken) {
				t.Errorf("the log holds the token:\n%s", logs)
			}
			if strings.Contains(logs, "serving beyond this host") {
				t.Errorf("a loopback API logged the warning for other hosts:\n%s", logs)
			}
		})
	}
}

// TestAPIBeyondLoopbackWarns: an API listening on every interface is served,
// with a warning saying so.
func TestAPIBeyondLoopbackWarns(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.db")
	cfg := writeConfig(t, "database: {path: "+path+"}\nlog: {format: json}\napi: {listen: \"0.0.0.0:0\"}\n")
	h := &harness{t: t, env: map[string]string{APITokenEnvDefault: apiTestToken}, config: cfg}
	h.mustRun("migrate")
	run := startAPIRun(t, h.env, cfg)
	addr := run.addr()
	_, port, _ := strings.Cut(addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(addr, ":")
	}
	if status, body := call(t, "GET", "http://127.0.0.1:"+port+"/v1/history", ""); status != http.StatusOK {
		t.Errorf("GET /v1/history: %d %s", status, body)
	}
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "run logs", run.log.String(), `"level":"WARN","msg":"api: serving beyond this host`)
}

// TestAPIRunWithoutToken: with api.listen set and the token's variable
// unset or empty, run refuses to start, before it starts anything, with a
// configuration error naming the key, the variable and the line.
func TestAPIRunWithoutToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		line       int
		variable   string
	}{
		// token_env left out: the error is at api.listen's line.
		{"default variable unset", "api:\n  listen: 127.0.0.1:0\n", map[string]string{}, 3, APITokenEnvDefault},
		{"default variable empty", "api:\n  listen: 127.0.0.1:0\n", map[string]string{APITokenEnvDefault: ""}, 3, APITokenEnvDefault},
		{"named variable unset", "api:\n  listen: 127.0.0.1:0\n  token_env: ORDERS_API_TOKEN\n",
			map[string]string{APITokenEnvDefault: apiTestToken}, 4, "ORDERS_API_TOKEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "jobs.db")
			// With the status page too: nothing is served before the refusal.
			cfg := writeConfig(t, "database: {path: "+path+"}\n"+tc.yaml+"http:\n  listen: localhost:0\n")
			h := &harness{t: t, env: tc.env, config: cfg}
			h.mustRun("migrate")
			_, stderr, err := h.runCtx(context.Background(), "run")
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("run: %v, want a *ConfigError; logs:\n%s", err, stderr)
			}
			want := fmt.Sprintf("%s:%d: api.token_env: the environment variable %s is not set or empty", cfg, tc.line, tc.variable)
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("run: %v\nwant it to begin %q", err, want)
			}
			if strings.Contains(stderr, "msg=started") || strings.Contains(stderr, "serving api") || strings.Contains(stderr, "serving http") {
				t.Errorf("run started or served before it refused; it must refuse first:\n%s", stderr)
			}
			st, err := sqlite.Open(context.Background(), path, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if servers, err := st.ServerList(context.Background()); err != nil || len(servers) != 0 {
				t.Errorf("servers after run refused to start: %v (%v), want none", servers, err)
			}
		})
	}
}

// TestAPIListenFails: when api.listen cannot be listened on (the port is
// taken), run fails with an error naming the key and its line before it
// starts anything: no slot fired, no server registered.
func TestAPIListenFails(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	path := filepath.Join(t.TempDir(), "jobs.db")
	cfg := writeConfig(t, "database: {path: "+path+"}\napi:\n  listen: "+taken.Addr().String()+"\n")
	h := &harness{t: t, env: map[string]string{APITokenEnvDefault: apiTestToken}, config: cfg}
	h.mustRun("migrate")
	_, stderr, err := h.runCtx(context.Background(), "run")
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), cfg+":3: api.listen: listen tcp "+taken.Addr().String()) {
		t.Fatalf("run with api.listen taken: %v, want a *ConfigError at %s:3 naming api.listen; logs:\n%s", err, cfg, stderr)
	}
	if strings.Contains(stderr, "msg=started") {
		t.Errorf("run with api.listen taken started the server before refusing; logs:\n%s", stderr)
	}
	st, err := sqlite.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if servers, err := st.ServerList(context.Background()); err != nil || len(servers) != 0 {
		t.Errorf("servers after run failed to listen: %v (%v), want none: the started client must be stopped", servers, err)
	}
}

// TestAPIConfigErrors: the api section is checked by every command, each
// error naming the key and its line.
func TestAPIConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"api:\n  listen: \"8081\"\n", `:2: api.listen: "8081" is not host:port`},
		{"api:\n  listen: 127.0.0.1:8081\n  token_env: 1TOKEN\n", `:3: api.token_env: "1TOKEN" is not an environment variable name`},
		{"api:\n  token_env: \"\"\n", `:2: api.token_env: "" is not an environment variable name`},
		{"http:\n  listen: 127.0.0.1:9090\napi:\n  listen: 127.0.0.1:9090\n", `:4: api.listen: "127.0.0.1:9090" is http.listen too`},
		{"api:\n  port: 8081\n", `:2: api.port: unknown key "port" (known keys under api: listen, token_env)`},
	} {
		h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, tc.yaml)}
		if _, err := h.run("slots"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one containing %q", tc.yaml, err, tc.want)
		}
	}
	// Without api.listen no token is needed, and the API is not served.
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "api:\n  token_env: ORDERS_API_TOKEN\n")}
	if _, err := h.run("slots"); err != nil {
		t.Errorf("api without listen: %v", err)
	}
}

// The API token comes from an environment variable, often filled from a
// secrets file that ends in a newline (env files and secret mounts keep
// it). No request can carry a newline in a header, and the handler trims
// the token it receives, so run must take the token without the white
// space around it: it once served the API and answered every request 401
// "the bearer token is not valid", with nothing at start-up saying why.
func TestAPITokenWithTrailingNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jobs.db")
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, "database: {path: "+path+"}\nlog: {format: json}\napi:\n  listen: \"127.0.0.1:0\"\n")}
	h.mustRun("migrate")
	h.env[APITokenEnvDefault] = apiTestToken + "\n"
	run := startAPIRun(t, h.env, h.config)
	var addr string
	select {
	case addr = <-run.log.addr:
	case err := <-run.done:
		run.done <- err
		t.Fatalf("run with a token ending in a newline returned %v, want it served", err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("run did not serve the API; logs:\n%s", run.log.String())
	}
	status, body := call(t, "GET", "http://"+addr+"/v1/jobs/order/42", "")
	if status != http.StatusOK {
		t.Fatalf("%s=%q (the token and a newline): run served the API, but a request with the token got %d %s: "+
			"no request can ever authenticate", APITokenEnvDefault, apiTestToken+"\n", status, body)
	}
}

// TestAPIAnswersWhileStarting: api.listen is bound before the database is
// reached (so that a taken port fails at once), and while run waits for the
// database every request is answered 503 saying so, not left hanging on a
// listener nobody serves; once the database is up the API serves.
func TestAPIAnswersWhileStarting(t *testing.T) {
	t.Parallel()
	in := pgtest.NewInstance(t)
	in.Stop()
	addr := freeAddr(t)
	cfg := writeConfig(t, "log: {format: json}\nslots: {resolution: 1s, cycle: 0s}\napi:\n  listen: "+addr+"\n")
	run := startAPIRun(t, map[string]string{EnvDatabaseURL: in.URL, APITokenEnvDefault: apiTestToken}, cfg, "--migrate")
	for !strings.Contains(run.log.String(), "not ready, retrying") {
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("run returned %v while the database was down; logs:\n%s", err, run.log.String())
		case <-time.After(50 * time.Millisecond): // polling a log, not synchronising goroutines
		}
	}
	body := `{"entity": "order", "key": "42", "check": "order_unshipped", "in": "3h"}`
	req, err := http.NewRequest("POST", "http://"+addr+"/v1/schedule", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiTestToken)
	res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req) // a guard: unanswered, the request hung
	if err != nil {
		t.Fatalf("POST /v1/schedule while starting: %v; want 503 at once", err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(raw), "starting") || res.Header.Get("Retry-After") == "" {
		t.Errorf("while starting: %d %s (Retry-After %q); want 503 saying prescient is starting, with Retry-After",
			res.StatusCode, raw, res.Header.Get("Retry-After"))
	}
	in.Start()
	run.addr() // "serving api", logged once started
	if status, raw := call(t, "POST", "http://"+addr+"/v1/schedule", body); status != http.StatusCreated {
		t.Errorf("once started: %d %s, want 201", status, raw)
	}
}
