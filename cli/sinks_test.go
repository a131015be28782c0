package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/sqlite"
)

const sinksYAML = `database:
  url: postgres://app@db/app
sinks:
  ops:
    type: webhook
    url: https://alerts.example.com/prescient?token=abc
    secret_env: PRESCIENT_WEBHOOK_SECRET
    timeout: 5s
    max_attempts: 8
  audit:
    type: postgres
    channel: prescient_events
  console:
    type: log
`

// The sinks section reads into SinkConfig by name; keys left out take the
// defaults; SinkNames lists the names sorted.
func TestSinksConfig(t *testing.T) {
	cfg, err := loadConfig(writeConfig(t, sinksYAML), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.SinkNames(); !slices.Equal(got, []string{"audit", "console", "ops"}) {
		t.Errorf("SinkNames: %v", got)
	}
	ops := cfg.sinkOptions("ops")
	if ops.Timeout != 5*time.Second || ops.MaxAttempts != 8 || ops.Backoff.Initial != delivery.BackoffInitialDefault || ops.Backoff.Max != delivery.BackoffMaxDefault {
		t.Errorf("ops: %+v, want the file's timeout and attempts and the default backoff", ops)
	}
	audit := cfg.sinkOptions("audit")
	if audit.Timeout != delivery.TimeoutDefault || audit.MaxAttempts != delivery.MaxAttemptsDefault || cfg.Sinks["audit"].channel() != "prescient_events" {
		t.Errorf("audit: %+v, want the defaults", audit)
	}
	if DefaultConfig().Sinks == nil || len(DefaultConfig().SinkNames()) != 0 {
		t.Error("the default configuration has sinks")
	}
}

func TestSinksConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"no type", "sinks:\n  ops:\n    url: https://x\n", []string{":2: sinks.ops: has no type"}},
		{"unknown type", "sinks:\n  ops:\n    type: email\n", []string{":3: sinks.ops.type: unknown type \"email\"", "log, webhook or postgres"}},
		{"unknown key", "sinks:\n  ops:\n    type: log\n    colour: red\n", []string{":4: sinks.ops.colour: unknown key", "type, url, secret_env"}},
		{"key of another type", "sinks:\n  ops:\n    type: log\n    url: https://x\n", []string{":4: sinks.ops.url: does not apply to a log sink"}},
		{"webhook without url", "sinks:\n  ops:\n    type: webhook\n    secret_env: S\n", []string{":2: sinks.ops: a webhook sink needs url"}},
		{"webhook without secret", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n", []string{":2: sinks.ops: a webhook sink needs secret_env"}},
		{"webhook url not http", "sinks:\n  ops:\n    type: webhook\n    url: ftp://x/tok3n\n    secret_env: S\n", []string{":4: sinks.ops.url: is not an http:// or https:// URL"}},
		// Found by a trial of event delivery: every delivery failed to dial
		// ("invalid port") until it was dead.
		{"webhook url port out of range", "sinks:\n  ops:\n    type: webhook\n    url: http://127.0.0.1:99999/hook\n    secret_env: S\n", []string{":4: sinks.ops.url: has port \"99999\": a port is 1 to 65535"}},
		{"webhook url port 0", "sinks:\n  ops:\n    type: webhook\n    url: http://127.0.0.1:0/hook\n    secret_env: S\n", []string{":4: sinks.ops.url: has port \"0\""}},
		{"webhook url port only", "sinks:\n  ops:\n    type: webhook\n    url: http://:8080/hook\n    secret_env: S\n", []string{":4: sinks.ops.url: is not an http:// or https:// URL with a host"}},
		{"bad secret_env", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: 1BAD\n", []string{":5: sinks.ops.secret_env:", "not an environment variable name"}},
		{"postgres on SQLite", "sinks:\n  audit:\n    type: postgres\n", []string{":3: sinks.audit.type: postgres applies to the PostgreSQL store only", "database.url"}},
		{"bad channel", "database: {url: postgres://db/app}\nsinks:\n  audit:\n    type: postgres\n    channel: Bad-Name\n", []string{":5: sinks.audit.channel:", "LISTEN"}},
		{"zero timeout", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: S\n    timeout: 0s\n", []string{":6: sinks.ops.timeout: must be at least 1ms"}},
		{"zero attempts", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: S\n    max_attempts: 0\n", []string{":6: sinks.ops.max_attempts: must be at least 1"}},
		{"backoff max under initial", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: S\n    backoff_initial: 1m\n    backoff_max: 10s\n",
			[]string{":7: sinks.ops.backoff_max: 10s is less than backoff_initial, 1m0s"}},
		// The key written is named, at its line (found by an operator's
		// trial: backoff_max, which the file did not have, at no line).
		{"backoff initial over the default max", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: S\n    backoff_initial: 2h\n",
			[]string{":6: sinks.ops.backoff_initial: 2h0m0s is more than backoff_max, 1h0m0s (its default): set backoff_max to at least 2h0m0s"}},
		{"timeout -1", "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: S\n    timeout: -1\n", []string{":6: sinks.ops.timeout: must be at least 1ms (such as 10s), got -1"}},
		{"bad sink name", "sinks:\n  'o ps':\n    type: log\n", []string{":2: sinks.o ps: invalid sink name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := loadConfig(path, noEnv)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatalf("got no error for\n%s\nwant one containing %q", tt.body, tt.want)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "tok3n") {
				t.Errorf("error %q shows the URL's token", msg)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.HasPrefix(msg, path) {
				t.Errorf("error %q is not a *ConfigError starting with the file name", msg)
			}
		})
	}
}

// TestSlotsRefusesUnsetSinkSecret: `prescient slots`, which checks the
// configuration, refuses a webhook sink whose secret_env is not set with
// run's own error, instead of "configuration OK" for a configuration run
// refuses (found by a trial of bad input); --json says so too.
func TestSlotsRefusesUnsetSinkSecret(t *testing.T) {
	t.Parallel()
	body := "database:\n  path: " + filepath.Join(t.TempDir(), "p.db") +
		"\nsinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: HOOK_SECRET\n"
	h := &harness{t: t, env: map[string]string{}, config: writeConfig(t, body)}
	want := h.config + ":7: sinks.ops.secret_env: HOOK_SECRET is not set (or is empty, or only white space)"
	_, runErr := h.run("run")
	if runErr == nil || !strings.Contains(runErr.Error(), want) {
		t.Fatalf("run: %v, want an error containing %q", runErr, want)
	}
	out, err := h.run("slots")
	if err == nil || err.Error() != runErr.Error() {
		t.Errorf("slots: %v, want run's error %q; output:\n%s", err, runErr, out)
	}
	if strings.Contains(out, "configuration OK") {
		t.Errorf("slots says the configuration is OK:\n%s", out)
	}
	out, err = h.run("slots", "--json")
	var rep slotsReport
	if err == nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Valid || !strings.Contains(rep.Error, want) {
		t.Errorf("slots --json: %v, %+v; want invalid, with an error containing %q", err, rep, want)
	}
	h.env["HOOK_SECRET"] = "s3cret-value"
	if out, err := h.run("slots"); err != nil || !strings.Contains(out, "configuration OK") {
		t.Errorf("slots with the secret set: %v\n%s", err, out)
	}
}

// `run` refuses to start when a webhook's secret variable is not set, or a
// check names a sink that is not configured, naming the key and its line;
// the secret's value is never shown.
func TestStartDeliveryRefuses(t *testing.T) {
	body := "sinks:\n  ops:\n    type: webhook\n    url: https://x\n    secret_env: HOOK_SECRET\n  console:\n    type: log\n"
	path := writeConfig(t, body)
	cfg, err := loadConfig(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := &checks.Registry{}
	noop := func(context.Context, *checks.Job) (time.Time, error) { return time.Time{}, nil }
	if err := reg.Register("fine", noop, &checks.Opts{Sinks: []string{"ops", "console"}}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("order_unshipped", noop, &checks.Opts{Sinks: []string{"pager"}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := &env{opts: (&Opts{Checks: reg, lookupEnv: envOf(map[string]string{"HOOK_SECRET": ""})}).withDefaults()}
	_, err = e.sinkSecrets(cfg, log)
	if err == nil {
		t.Fatal("started with a check naming an unknown sink and an empty secret")
	}
	for _, want := range []string{
		path + ":5: sinks.ops.secret_env: HOOK_SECRET is not set (or is empty, or only white space)",
		path + ":1: sinks: check order_unshipped delivers its events to sink \"pager\", which is not configured (configured: console, ops)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "fine") {
		t.Errorf("error %q names a check whose sinks exist", err)
	}

	// With the secret set and the check's sinks configured, it starts (and
	// stops at once: the database is never reached).
	reg = &checks.Registry{}
	if err := reg.Register("fine", noop, &checks.Opts{Sinks: []string{"ops"}}); err != nil {
		t.Fatal(err)
	}
	e = &env{opts: (&Opts{Checks: reg, lookupEnv: envOf(map[string]string{"HOOK_SECRET": "s3cret-value"})}).withDefaults()}
	cfg.Database.Path = t.TempDir() + "/prescient.db"
	secrets, err := e.sinkSecrets(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := e.startDelivery(context.Background(), cfg, secrets, log)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stop()
	if _, ok := e.observer.(wakeOnSlot); !ok {
		t.Errorf("the clients' observer is %T, want the one that wakes the workers after a slot", e.observer)
	}
}

// claimCounter counts DeliveriesClaim calls.
type claimCounter struct {
	driver.Driver
	n atomic.Int32
}

func (d *claimCounter) DeliveriesClaim(ctx context.Context, p *driver.DeliveriesClaimParams) ([]*driver.Delivery, error) {
	d.n.Add(1)
	return d.Driver.DeliveriesClaim(ctx, p)
}

// A slot that checked jobs wakes the delivery workers at once, rather than
// at their next poll (an hour away here); the engine's own observer still
// hears of it.
func TestSlotFiredWakesTheWorkers(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	drv := &claimCounter{Driver: st}
	d, err := delivery.New(drv, &delivery.Config{Server: "s", Now: clock, Poll: time.Hour, Logger: slog.New(slog.DiscardHandler),
		Targets: []delivery.Target{{Name: "console", Sink: &delivery.Log{Logger: slog.New(slog.DiscardHandler)}}}})
	if err != nil {
		t.Fatal(err)
	}
	w := &waker{}
	w.d.Store(d)
	inner := &slotCounter{}
	obs := wakeOnSlot{Observer: inner, w: w}
	d.Start()
	defer d.Stop(context.Background())
	pollUntil(t, "the worker's first look", func() bool { return drv.n.Load() == 1 })

	// An event due a minute later: the first look did not see it, and the
	// next poll is an hour away.
	tx, err := st.Begin(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.OutboxRecord(context.Background(), &driver.OutboxRecordParams{JobID: 1, Entity: "order", Key: "1", Check: "c",
		Stage: "s", Event: "e", IdempotencyKey: "order/1/c/s", Sinks: []string{"console"}, Now: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	now.Store(t0.Add(time.Minute).UnixNano())
	obs.SlotFired(prescient.SlotEvent{Checked: 1})
	pollUntil(t, "the event delivered after the slot woke the worker", func() bool {
		c, err := st.DeliveryCounts(context.Background(), t0)
		return err == nil && c["console"] != nil && c["console"].Delivered == 1
	})
	if inner.slots.Load() != 1 {
		t.Errorf("the engine's observer heard of %d slots, want 1", inner.slots.Load())
	}
}

type slotCounter struct {
	prescient.NopObserver
	slots atomic.Int32
}

func (o *slotCounter) SlotFired(prescient.SlotEvent) { o.slots.Add(1) }

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after 30s: no %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A webhook's secret is read without the white space around it, as the API
// token is: a secret file mounted into the environment ends with a line
// break the receiver's copy does not have, and every request's signature
// failed to verify (found by an operator's trial). One of white space only
// is refused.
func TestWebhookSecretTrimmed(t *testing.T) {
	dir := t.TempDir()
	got := make(chan error, 1)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case got <- delivery.Verify([]byte("s3cret-value"), r.Header.Get(delivery.HeaderSignature), body, time.Now(), time.Hour):
		default:
		}
	}))
	defer rcv.Close()
	cfg, err := ParseConfig(filepath.Join(dir, "prescient.yaml"), []byte("database:\n  path: "+filepath.Join(dir, "p.db")+
		"\nsinks:\n  ops:\n    type: webhook\n    url: "+rcv.URL+"\n    secret_env: HOOK_SECRET\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	reg := &checks.Registry{}
	e := &env{opts: (&Opts{Checks: reg, lookupEnv: envOf(map[string]string{"HOOK_SECRET": " \n\t"})}).withDefaults()}
	if _, err := e.sinkSecrets(cfg, log); err == nil || !strings.Contains(err.Error(), "HOOK_SECRET is not set (or is empty, or only white space)") {
		t.Fatalf("start with a secret of white space only: %v, want it refused", err)
	}

	st, err := sqlite.Open(context.Background(), cfg.Database.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx, err := st.Begin(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.OutboxRecord(context.Background(), &driver.OutboxRecordParams{JobID: 1, Entity: "order", Key: "1", Check: "c",
		Stage: "s", Event: "e", IdempotencyKey: "order/1/c/s", Sinks: []string{"ops"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	e = &env{opts: (&Opts{Checks: reg, lookupEnv: envOf(map[string]string{"HOOK_SECRET": "s3cret-value\n"})}).withDefaults()}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	slogger := slog.New(slog.NewTextHandler(logs, nil))
	secrets, err := e.sinkSecrets(cfg, slogger)
	if err != nil {
		t.Fatal(err)
	}
	stop, err := e.startDelivery(ctx, cfg, secrets, slogger)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer stop()
	defer cancel()
	// Said at start-up, for a receiver that verifies with the value as it
	// was.
	if !strings.Contains(logs.String(), "level=WARN msg=\"webhook secret: the white space around the value of HOOK_SECRET is not part") ||
		!strings.Contains(logs.String(), "dropped_bytes=1") {
		t.Errorf("start-up log: %q, want a warning that the white space was dropped", logs.String())
	}
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("the receiver's check of the signature with the secret without its line break: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no request reached the receiver in 30s")
	}
}

// run refuses a webhook sink whose secret is not set before it serves
// anything: its log said "serving http" first, then the server exited (found
// by an SRE's trial).
func TestRunWithoutASinkSecretServesNothing(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs.db")
	cfg := writeConfig(t, "database: {path: "+path+"}\nhttp:\n  listen: 127.0.0.1:0\n"+
		"sinks:\n  ops:\n    type: webhook\n    url: http://127.0.0.1:9/\n    secret_env: HOOK_SECRET\n")
	h := &harness{t: t, env: map[string]string{}, config: cfg}
	h.mustRun("migrate")
	_, stderr, err := h.runCtx(context.Background(), "run")
	if err == nil || !strings.Contains(err.Error(), "sinks.ops.secret_env: HOOK_SECRET is not set") {
		t.Fatalf("run without HOOK_SECRET: %v, want the sink's secret refused; logs:\n%s", err, stderr)
	}
	if strings.Contains(stderr, "serving http") || strings.Contains(stderr, "msg=started") {
		t.Errorf("run served or started before it refused; it must refuse first:\n%s", stderr)
	}
}
