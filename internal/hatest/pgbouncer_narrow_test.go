package hatest

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// Behind PgBouncer in transaction pooling mode (supported, README "High
// availability" and docs/ha.md "PgBouncer"), a group whose claim skips a job
// (held by another transaction: another server firing or sweeping the slot,
// an application's transaction) narrows its attempt "beside the open
// transaction" (Store.AttemptNarrow), which "fails at once when the pool has
// no connection to spare, and after narrowWait [250ms] without one" so that
// groups cannot wait for each other for ever. That guard looks at pgx's
// pool, which holds client connections to PgBouncer; the server connection
// the statement needs is PgBouncer's to give, and AttemptNarrow's statement
// ran without a deadline. When PgBouncer's server connections are all in
// open transactions (here: the group's own, and three others sharing
// PgBouncer's pool of 4), the group waited, holding its server connection,
// for one that only its own end would free: the slot stalled for
// PgBouncer's query_wait_timeout (120s by default; for ever with 0), and
// every other client of PgBouncer with it (found by a review). The
// statement now gives up after narrowExecWait, and the group rolls back and
// claims again, as when the pool has no connection to spare.
func TestPgBouncerNarrowDoesNotWaitForItsOwnServerConnection(t *testing.T) {
	requirePackage(t, pgbouncerPackage, pgbouncerBin)
	b := startPgBouncer(t)
	ctx := context.Background()

	mig, err := postgres.Open(ctx, b.direct, nil) // migrations directly, as docs/ha.md says
	if err != nil {
		t.Fatal(err)
	}
	if err := mig.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mig.Close()
	st, err := postgres.Open(ctx, b.url("exec"), &postgres.Opts{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	reg := &checks.Registry{}
	if err := reg.Register("noop", func(ctx context.Context, j *checks.Job) (time.Time, error) { return time.Time{}, nil }, nil); err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 3, 10, 10, 0, 0, 0, time.UTC)
	now := slot.Add(time.Second)
	c, err := prescient.NewClient(st, &prescient.Config{
		Server: "a", Grid: slots.Grid{Resolution: time.Minute, Cycle: time.Minute}, Checks: reg,
		Now: func() time.Time { return now }, Workers: 1,
		SweepOnStartDisabled: true, SweepSchedule: "-", PruneSchedule: "-",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SyncCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.GridSave(ctx, c.Config().Grid); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"free", "locked"} {
		j, err := c.Schedule(ctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: "noop", At: slot})
		if err != nil {
			t.Fatal(err)
		}
		slot = j.NextCheckAt // the first slot after now
	}

	// Another transaction holds job "locked" (directly on PostgreSQL).
	locker, err := connect(ctx, b.direct)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close(ctx)
	if _, err := locker.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Exec(ctx, "SELECT 1 FROM prescient_jobs WHERE entity_key = 'locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	// Three of PgBouncer's four server connections are in other clients'
	// transactions (the application's, another server's groups).
	for range bouncerPoolSize - 1 {
		other, err := connect(ctx, b.url("exec"))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		if _, err := other.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, "SELECT 1"); err != nil { // takes a server connection until COMMIT
			t.Fatal(err)
		}
	}

	type result struct {
		rec *prescient.SlotRecord
		err error
	}
	now = slot.Add(time.Second)
	done := make(chan result, 1)
	began := time.Now()
	go func() {
		rec, err := c.FireSlot(ctx, slot)
		done <- result{rec, err}
	}()
	const limit = 20 * time.Second // narrowWait is 250ms; a 2-job slot takes milliseconds
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("fire slot: %v", r.err)
		}
		t.Logf("slot fired in %v: %+v", time.Since(began), r.rec)
	case <-time.After(limit):
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		clients, servers := b.poolFigures(t)
		b.proc.killGroup() // ends the wait so that the test can end
		<-done
		t.Fatalf("FireSlot of 2 jobs (1 held by another transaction) still running after %v behind PgBouncer (%d client, %d server connections): "+
			"the group holds one of PgBouncer's server connections in its transaction while AttemptNarrow waits, with no deadline, "+
			"for another; narrowWait only bounds pgx's pool, which has client connections to spare (a goroutine in Store.AttemptNarrow: %v)",
			limit, clients, servers, strings.Contains(stacks, "postgres.(*Store).AttemptNarrow"))
	}
}
