package faulttest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestFrozenServer stops a server (SIGSTOP: a frozen VM, a suspended host)
// in the middle of its slot, its connections left open and its
// transactions holding the jobs they claimed. PostgreSQL ends those
// transactions once they have waited longer than any healthy one waits for
// its next statement, and the servers that took the stopped one's
// positions over sweep again by then and take its jobs while it stays
// stopped (the scheduled sweep is an hour away); resumed, it doubles
// nothing. Before, the claimed jobs stayed locked for as long as the
// server stayed stopped (found by a trial: 1,000 jobs, 89 s late after a
// 92 s freeze, and without end for a server that never resumes).
func TestFrozenServer(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	// No scheduled sweep to speak of: the takeover's sweeps alone.
	c := newCluster(t, url, schema, clusterOpts{auto: true, runtime: 3 * time.Second, sweepInterval: time.Hour})
	for _, n := range []string{"a", "b", "c"} {
		c.start(n)
	}
	ready(t, c.store.Pool(), 3)
	ctx := context.Background()
	slot := c.grid.Ceil(time.Now().Add(3 * time.Second))
	pos := c.grid.Position(slot)
	// The owner of the slot's position, once ownership has spread.
	var owner string
	for end := time.Now().Add(30 * time.Second); owner == ""; {
		var owners []string
		rows, err := c.store.Pool().Query(ctx, "SELECT name FROM prescient_servers WHERE $1 = ANY(positions)", pos)
		if err == nil {
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					owners = append(owners, s)
				}
			}
			rows.Close()
		}
		if len(owners) == 1 {
			owner = owners[0]
		} else if time.Now().After(end) {
			t.Fatalf("position %d of slot %s: owners %v, want one", pos, slot, owners)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// 400 checks of 50 ms: 8 groups at once, each claiming its jobs first.
	w := workload{jobs: c.scheduleMore("frozen", 400, 50, slot)}
	for end := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := c.store.Pool().QueryRow(ctx, "SELECT count(*) FROM fault_alerts WHERE slot = $1 AND server = $2", slot, owner).Scan(&n); err == nil && n > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s did not begin slot %s\n%s", owner, slot, c.logTail(owner))
		}
		time.Sleep(5 * time.Millisecond)
	}
	p := c.proc(owner)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The jobs its transactions hold: the ones the others cannot lock.
	var due, free int
	if err := c.store.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM prescient_jobs WHERE next_check_at = $1),
		(SELECT count(*) FROM (SELECT id FROM prescient_jobs WHERE next_check_at = $1 FOR UPDATE SKIP LOCKED) f)`, slot).Scan(&due, &free); err != nil {
		t.Fatal(err)
	}
	if due == free {
		t.Fatalf("%s held none of the %d jobs left in its slot when it stopped: the test needs it mid-group", owner, due)
	}
	// Every job done while the owner stays stopped.
	f := c.waitSettled(w, 60*time.Second)
	t.Logf("frozen server: %s stopped %s into slot %s holding %d of the %d jobs left; the others finished every job %s later: %v",
		owner, stopped.Sub(slot).Round(time.Millisecond), slot.Format(time.TimeOnly), due-free, due, time.Since(stopped).Round(time.Millisecond), f)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Resumed, its transactions are gone: what it ran commits nothing.
	c.waitLog(owner, "idle-in-transaction", 1)
	f, err := c.measure(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	c.check(f)
}
