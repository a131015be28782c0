package faulttest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestCrash kills one of three servers with SIGKILL at random moments and
// restarts it, over and over, while tens of thousands of check-runs (in the
// long variant) come due. The servers' clocks are skewed by up to 1.4s
// against each other.
func TestCrash(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	c := newCluster(t, url, schema, clusterOpts{auto: true})
	skew := map[string]string{"a": "-700", "b": "0", "c": "700"}
	names := []string{"a", "b", "c"}
	for _, n := range names {
		c.start(n, "FAULT_CLOCK_SKEW_MS="+skew[n])
	}
	ready(t, c.store.Pool(), 3)
	w := c.schedule(size(6000, 40000), size(15, 60), 10, 1, time.Now().Add(2*time.Second))

	kills := 0
	for time.Now().Before(w.lastSlot.Add(2 * time.Second)) {
		sleepRandom(time.Second, 2500*time.Millisecond)
		victim := names[rand.N(len(names))]
		c.kill(victim)
		kills++
		sleepRandom(100*time.Millisecond, 1500*time.Millisecond)
		c.start(victim, "FAULT_CLOCK_SKEW_MS="+skew[victim])
	}
	f := c.waitSettled(w, 2*time.Minute)
	c.check(f)
	if kills == 0 {
		t.Fatal("no server was killed: the test proved nothing")
	}
	t.Logf("crash: %v, kills %d, clock skew ±700ms", f, kills)
}

// TestTakeover kills one of three servers for good; with automatic ownership
// its positions move to the other two, which fire its slots.
func TestTakeover(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	c := newCluster(t, url, schema, clusterOpts{auto: true, sweepInterval: time.Hour})
	for _, n := range []string{"a", "b", "c"} {
		c.start(n)
	}
	ready(t, c.store.Pool(), 3)
	w := c.schedule(size(3000, 20000), size(15, 40), 10, 0, time.Now().Add(2*time.Second))
	time.Sleep(3 * time.Second) // let a few slots fire with all three
	var cPositions []int32
	if err := c.store.Pool().QueryRow(context.Background(), "SELECT positions FROM prescient_servers WHERE name = 'c'").Scan(&cPositions); err != nil || len(cPositions) == 0 {
		t.Fatalf("c's positions before it died: %v, %v", cPositions, err)
	}
	killed := time.Now()
	c.kill("c")
	f := c.waitSettled(w, 2*time.Minute)
	c.check(f)

	// a and b now report every position between them.
	servers, err := c.client.Status(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var owned []int
	for _, s := range servers.Servers {
		if s.Name != "c" {
			owned = append(owned, s.Positions...)
		}
	}
	slices.Sort(owned)
	if !slices.Equal(owned, []int{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("after c died, a and b own %v, want all six positions", owned)
	}
	var byC, afterKill int
	if err := c.store.Pool().QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE server = 'c'), count(*) FROM fault_alerts").Scan(&byC, &afterKill); err != nil {
		t.Fatal(err)
	}
	// With the scheduled sweep off, only the takeover can have fired the
	// slots of c's positions after it died: a or b, on time if they took the
	// positions over before the slot came, late (catch-up from the ledger,
	// or the sweep on takeover) if not. The grid is 1s with a 6s cycle, so a
	// slot's position is its Unix second mod 6.
	var taken, takenJobs int
	var worstLag time.Duration
	if err := c.store.Pool().QueryRow(context.Background(), `SELECT count(*), coalesce(sum(checked), 0), coalesce(max(started_at - slot), '0')
		FROM prescient_slots
		WHERE checked > 0 AND server <> 'c' AND slot > $1 AND (extract(epoch FROM slot)::bigint % 6)::int = ANY($2)`,
		killed, cPositions).Scan(&taken, &takenJobs, &worstLag); err != nil {
		t.Fatal(err)
	}
	if taken == 0 {
		t.Fatalf("no slot of c's positions %v was fired by a or b after c died: its positions did not move", cPositions)
	}
	t.Logf("takeover: %d slots of c's positions %v (%d checks) fired by a and b after it died, up to %s after their slot",
		taken, cPositions, takenJobs, worstLag.Round(time.Millisecond))
	t.Logf("takeover: %v; c fired %d of %d alerts before it died", f, byC, afterKill)
}

// TestDatabaseRestart stops PostgreSQL in the middle of a run (every
// connection cut, as a crash would) and starts it again three seconds later;
// the servers keep running, retry, and catch up what they missed.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	in := pgtest.NewInstance(t)
	c := newCluster(t, in.URL, "prescient", clusterOpts{auto: true})
	health := map[string]string{}
	for _, n := range []string{"a", "b", "c"} {
		health[n] = "127.0.0.1:" + strconv.Itoa(freePort(t))
		c.start(n, "FAULT_HTTP_LISTEN="+health[n])
	}
	ready(t, c.store.Pool(), 3)
	w := c.schedule(size(4000, 20000), size(12, 40), 10, 1, time.Now().Add(2*time.Second))
	time.Sleep(3 * time.Second)
	for _, n := range []string{"a", "b", "c"} {
		waitReady(t, health[n], http.StatusOK)
	}
	in.Stop()
	outage := time.Now()
	for _, n := range []string{"a", "b", "c"} {
		waitReady(t, health[n], http.StatusServiceUnavailable)
	}
	time.Sleep(3*time.Second - time.Since(outage)) // the rest of the outage
	in.Start()
	down := time.Since(outage)
	for _, n := range []string{"a", "b", "c"} {
		waitReady(t, health[n], http.StatusOK)
	}
	f := c.waitSettled(w, 2*time.Minute)
	c.check(f)
	for _, n := range []string{"a", "b", "c"} {
		select {
		case <-c.proc(n).done:
			t.Fatalf("server %s exited during the outage\n%s", n, c.logTail(n))
		default:
		}
	}
	t.Logf("database restart: %v, outage %s; every server reported not ready during it and ready after", f, down.Round(100*time.Millisecond))
}

// waitReady polls a server's /readyz (over real HTTP on loopback) until it
// answers with the status code want.
func waitReady(t *testing.T, addr string, want int) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	client := &http.Client{Timeout: time.Second}
	last := "no answer"
	for time.Now().Before(end) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s/readyz did not answer %d within 20s; last: %s", addr, want, last)
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGracefulStop sends SIGTERM to the only server in the middle of a
// large slot: it finishes its in-flight checks and exits 0 within its grace
// period; a restarted server takes the rest. A second signal exits at once,
// and loses nothing either.
func TestGracefulStop(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	const grace = 10 * time.Second
	c := newCluster(t, url, schema, clusterOpts{grace: grace, sweepInterval: time.Hour})
	c.start("a")
	ready(t, c.store.Pool(), 1)
	first := time.Now().Add(2 * time.Second)
	w := c.schedule(size(1500, 8000), 1, 0, 20, first) // one large slot, 20ms a check
	waitUntil(t, c, "SELECT count(*) > 0 FROM fault_alerts")
	code, took := c.signal("a", syscall.SIGTERM, grace+5*time.Second)
	if code != 0 {
		t.Fatalf("SIGTERM: exit code %d, want 0\n%s", code, c.logTail("a"))
	}
	if took > grace {
		t.Fatalf("SIGTERM: took %s, longer than the grace period %s", took, grace)
	}
	var done int
	if err := c.store.Pool().QueryRow(context.Background(), "SELECT count(*) FROM fault_alerts").Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done >= w.jobs {
		t.Fatalf("the slot finished before SIGTERM (%d of %d): the test proved nothing", done, w.jobs)
	}

	// Restart with slow checks in flight, then stop it hard: SIGTERM and,
	// once the server has taken it (Linux does not queue a second identical
	// signal that arrives before the first is handled), a second one.
	c.start("a")
	slowAt := time.Now().Add(time.Second)
	slow := c.scheduleMore("slow", 16, 4000, slowAt)
	w.jobs += slow
	// The slow slot has started and not finished: its checks are in flight.
	waitUntil(t, c, fmt.Sprintf("SELECT count(*) > 0 FROM prescient_slots WHERE server = 'a' AND finished_at IS NULL AND slot = '%s'",
		c.grid.Ceil(slowAt).Format(time.RFC3339Nano)))
	seen := c.logCount("a", "received terminated")
	_ = c.proc("a").cmd.Process.Signal(syscall.SIGTERM)
	c.waitLog("a", "received terminated", seen+1)
	if code, _ := c.signal("a", syscall.SIGTERM, 5*time.Second); code != 130 {
		t.Fatalf("second signal: exit code %d, want 130 (exit at once)\n%s", code, c.logTail("a"))
	}

	c.start("a") // the start-up sweep takes whatever is left
	f := c.waitSettled(w, 2*time.Minute)
	c.check(f)
	t.Logf("graceful stop: %v; first SIGTERM exited 0 after %s with %d of %d checks done", f, took.Round(time.Millisecond), done, w.jobs)
}

// waitUntil polls the database until the boolean query is true, for up to
// limit.
func waitUntil(t *testing.T, c *cluster, query string) {
	t.Helper()
	const limit = 30 * time.Second
	end := time.Now().Add(limit)
	for {
		var ok bool
		if err := c.store.Pool().QueryRow(context.Background(), query).Scan(&ok); err == nil && ok {
			return
		}
		if time.Now().After(end) {
			var logs []string
			for name := range c.procs {
				logs = append(logs, c.logTail(name))
			}
			t.Fatalf("%q not true within %s\n%s", query, limit, strings.Join(logs, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
