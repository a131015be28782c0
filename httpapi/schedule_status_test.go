package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/httpapi"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// POST /v1/schedule answers 200 ("it was pending: moved by replace, left as
// it was by keep") or 201 ("it was not pending"). It decided by reading the
// job before the upsert: when the job's check was running in a server's
// transaction, the upsert waited for it, and if the check ended the job
// (done) the upsert created a new one, still answered 200, "left as it was"
// (found by a review). It now asks the upsert (Job.Inserted).
func TestScheduleAnswersCreatedForAJobTheEngineEndedMeanwhile(t *testing.T) {
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	st, err := postgres.Open(ctx, url, &postgres.Opts{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		clk = time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	)
	nowFn := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	running, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg := &checks.Registry{}
	if err := reg.Register("order_unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		once.Do(func() { close(running) })
		<-release
		return time.Time{}, nil // done
	}, nil); err != nil {
		t.Fatal(err)
	}
	grid := slots.Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}
	client, err := prescient.NewClient(st, &prescient.Config{Server: "s1", Grid: grid, Checks: reg, Now: nowFn,
		SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-"})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.GridSave(ctx, grid); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(client, &httpapi.Opts{Token: token}))
	t.Cleanup(srv.Close)

	slot := time.Date(2026, 3, 10, 10, 15, 0, 0, time.UTC)
	old, err := client.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: "42", Check: "order_unshipped", At: slot})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	clk = slot
	mu.Unlock()

	fired := make(chan error, 1)
	go func() {
		_, err := client.FireSlot(ctx, slot)
		fired <- err
	}()
	<-running // the job is claimed, its check runs

	type answer struct {
		status int
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		raw, _ := json.Marshal(map[string]any{"entity": "order", "key": "42", "check": "order_unshipped",
			"at": "2026-03-10T12:00:00Z", "on_conflict": "keep"})
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/schedule", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer res.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(res.Body)
		answered <- answer{status: res.StatusCode, body: b.Bytes()}
	}()

	// Wait until the request's upsert waits for the job's row lock (it
	// holds the row's tuple lock while it waits for the engine's
	// transaction), then let the check end the job.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	table := pgx.Identifier{schema, "prescient_jobs"}.Sanitize()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'tuple' AND relation = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the schedule request never waited for the running job")
		}
		time.Sleep(5 * time.Millisecond) // polling pg_locks for the request's wait, not synchronising goroutines
	}
	close(release)
	if err := <-fired; err != nil {
		t.Fatal(err)
	}
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	var got struct {
		ID int64 `json:"id"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatalf("answer %s: %v", a.body, err)
	}
	recs, err := client.History(ctx, history.Filter{Entity: "order", Key: "42"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Outcome != history.Done || got.ID == old.ID {
		t.Fatalf("setup: want the old job done and a new one created; history %+v, answered job id %d (old %d)", recs, got.ID, old.ID)
	}
	if a.status != http.StatusCreated {
		t.Errorf("POST /v1/schedule (on_conflict keep) answered %d, as if job %d had been pending and left as it was; "+
			"but job %d had ended (history: %s) and the answer is job %d, created by this request: want 201; body %s",
			a.status, old.ID, old.ID, recs[0].Outcome, got.ID, a.body)
	}
}
