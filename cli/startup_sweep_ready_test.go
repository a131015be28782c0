package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// TestReadyDuringTheStartupSweep: a server catching up on slots missed
// while it was down answered /readyz 503 "database unreachable", and its
// API 503 "starting", for as long as the start-up sweep ran (a day of
// slots: minutes), though the database was reachable and its ticks fired
// (found by a trial of catch-up after downtime). It is ready, and its API
// serves, from its first heartbeat.
func TestReadyDuringTheStartupSweep(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.SchemaName(t)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg := &checks.Registry{}
	if err := reg.Register("blocker", func(ctx context.Context, _ *checks.Job) (time.Time, error) {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return time.Time{}, nil
	}, &checks.Opts{Entity: "order"}); err != nil {
		t.Fatal(err)
	}
	// A job due in a slot an hour ago: the start-up sweep fires it.
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	c, err := prescient.NewClient(st, &prescient.Config{Server: "app", Grid: slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg, Now: func() time.Time { return past }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "1", Check: "blocker", At: past}); err != nil {
		t.Fatal(err)
	}
	st.Close()

	httpAddr, apiAddr := freeAddr(t), freeAddr(t)
	cfg := writeConfig(t, "database: {schema: "+schema+"}\nlog: {format: json}\nslots: {resolution: 15m}\n"+
		"http: {listen: \""+httpAddr+"\"}\napi: {listen: \""+apiAddr+"\"}\n")
	r := &apiRun{t: t, log: newAPILog(), done: make(chan error, 1)}
	root := NewRootCommand(&Opts{Checks: reg, Out: io.Discard, Err: r.log, lookupEnv: envOf(map[string]string{APITokenEnvDefault: apiTestToken, EnvDatabaseURL: url})})
	root.SetArgs([]string{"--config", cfg, "run"})
	runCtx, cancel := context.WithCancel(ctx)
	go func() { r.done <- root.ExecuteContext(runCtx) }()
	t.Cleanup(func() {
		once.Do(func() { close(entered) })
		select {
		case <-release:
		default:
			close(release)
		}
		cancel()
		<-r.done
	})
	select {
	case <-entered:
	case err := <-r.done:
		r.done <- err
		t.Fatalf("run returned %v before its start-up sweep ran the check; logs:\n%s", err, r.log.String())
	case <-time.After(time.Minute): // a guard against hanging, not a timing
		t.Fatalf("the start-up sweep did not run the overdue job; logs:\n%s", r.log.String())
	}
	// The start-up sweep is running (the check is blocked in it).
	var status int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			continue // not listening yet
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		status, body = res.StatusCode, string(raw)
		if status == http.StatusOK {
			break
		}
	}
	if status != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz during the start-up sweep: %d %q; want 200 ready", status, body)
	}
	if st, raw := call(t, "POST", "http://"+apiAddr+"/v1/schedule", `{"entity": "order", "key": "2", "check": "blocker", "in": "3h"}`); st != http.StatusCreated {
		t.Errorf("POST /v1/schedule during the start-up sweep: %d %s; want 201", st, raw)
	}
	if !strings.Contains(r.log.String(), `"msg":"serving api"`) {
		t.Errorf("no \"serving api\" logged while the API serves; logs:\n%s", r.log.String())
	}
	// Stopped during the start-up sweep, it stops: it does not say it
	// serves once the cut-short sweep returns.
	cancel()
	err = <-r.done
	r.done <- err
	if err != nil {
		t.Errorf("run stopped during its start-up sweep: %v; want nil", err)
	}
	if strings.Contains(r.log.String(), `"msg":"serving"`) {
		t.Errorf("\"serving\" logged after the signal that cut the start-up sweep short; logs:\n%s", r.log.String())
	}
}
