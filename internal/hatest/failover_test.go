package hatest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
)

// TestFailover kills the primary node (its pg_autoctl keeper, postmaster and
// backends, with SIGKILL) in the middle of a slot while two prescient
// servers with automatic ownership fire thousands of jobs over a 1-second
// grid, through a multi-host URL with target_session_attrs=read-write.
// pg_auto_failover promotes the synchronous secondary; the servers, never
// restarted, report not ready, reconnect to the new primary by themselves,
// and catch up. Every job is checked exactly once, every slot that was due
// while there was no primary is fired, and every schedule call that was
// acknowledged during the failover fires.
func TestFailover(t *testing.T) {
	runTransition(t, "failover")
}

// TestSwitchover is TestFailover with a planned switchover (`pg_autoctl
// perform switchover`) started in the middle of a slot instead of a crash.
func TestSwitchover(t *testing.T) {
	runTransition(t, "switchover")
}

func runTransition(t *testing.T, kind string) {
	f := pair(t)
	began := time.Now()
	ctx := context.Background()
	old, err := f.primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := newServers(t, f.URL(), fmt.Sprintf("ha_%s_%d", kind, time.Now().UnixNano()))
	s.start("a")
	s.start("b")
	s.waitRegistered(2)
	// 500 jobs a slot: ten groups of 50 for a server's 8 workers, so that
	// a slot is fired in two rounds and a fault can land between commits.
	const (
		jobs   = 12000
		spread = 24 // slots
		workMS = 2  // per check
	)
	w := s.schedule(jobs, spread, 10, workMS, time.Now().Add(2*time.Second))
	ready := s.watchReadiness()
	readyClosed := false
	defer func() {
		if !readyClosed {
			ready.close()
		}
	}()

	// Six slots fire on the old primary; then, while a later one is being
	// fired, the fault.
	cut := s.midSlot(s.grid.Add(w.first, 6))
	var (
		faultAt time.Time
		pid     int
		swOut   []byte
		swErr   error
		swDone  = make(chan struct{})
	)
	switch kind {
	case "failover":
		pid, faultAt, err = f.crash(old)
		if err != nil {
			t.Fatal(err)
		}
		close(swDone)
	case "switchover":
		faultAt = time.Now()
		go func() {
			defer close(swDone)
			sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			swOut, swErr = f.autoctl(sctx, "perform", "switchover", "--pgdata", old.pgdata, "--wait", "60")
		}()
	}

	// An application keeps scheduling through the fault: each call either
	// is acknowledged (and must then fire) or fails (and may or may not
	// have committed: it must then fire at most once).
	live := s.scheduleThrough()
	t.Cleanup(func() { // before the store closes, should the test fail first
		live.stopAfter(time.Now())
		<-live.done
	})

	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	newPrimary, err := f.waitPrimary(pctx, old)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(faultAt)
	if evs, err := f.events(ctx, faultAt.Add(-time.Second), faultAt); err == nil {
		t.Logf("%s: the monitor's events, from the fault:\n%s", kind, strings.Join(evs, "\n"))
	}
	s.waitTrue("SELECT EXISTS (SELECT FROM fault_alerts WHERE written_on = $1)", 60*time.Second, newPrimary.port)
	var firstCheck time.Time
	if err := s.store.Pool().QueryRow(ctx, "SELECT min(written_at) FROM fault_alerts WHERE written_on = $1", newPrimary.port).Scan(&firstCheck); err != nil {
		t.Fatal(err)
	}
	live.stopAfter(firstCheck.Add(time.Second))

	fig := s.waitSettled(w, 2*time.Minute)
	ready.close()
	readyClosed = true
	<-swDone
	if kind == "switchover" && swErr != nil {
		t.Fatalf("pg_autoctl perform switchover: %v\n%s", swErr, swOut)
	}
	if gone := s.exited(); len(gone) > 0 {
		t.Fatalf("servers %v exited: a failover must not need a restart\n%s", gone, s.logTails())
	}
	if fig.duplicates != 0 || fig.lost != 0 || fig.pending != 0 || fig.notDone != 0 {
		t.Fatalf("end state wrong: %v\n%s", fig, s.logTails())
	}

	// Every server reported not ready during the fault and ready after it,
	// and heartbeated on the new primary: it reconnected by itself.
	var windows []string
	for _, name := range []string{"a", "b"} {
		down, up, ok := ready.notReadyWindow(name, faultAt)
		if !ok {
			t.Fatalf("server %s did not report not ready and then ready again after the %s (readyz changes %v)\n%s",
				name, kind, ready.changes[name], s.logTail(name))
		}
		windows = append(windows, fmt.Sprintf("%s %s→%s", name, down.Sub(faultAt).Round(10*time.Millisecond), up.Sub(faultAt).Round(10*time.Millisecond)))
	}
	s.waitTrue("SELECT count(*) = 2 FROM prescient_servers WHERE heartbeat_at > $1", 10*time.Second, firstCheck)

	// The slot cut by the fault, and every slot that came due while there
	// was no primary, were fired: each of their jobs has its alert.
	oldDone, err := s.count("SELECT count(*) FROM fault_alerts WHERE stage = 1 AND slot = $1 AND written_on = $2", cut, old.port)
	if err != nil {
		t.Fatal(err)
	}
	// Job i is due in slot first + i mod spread; a job whose check the
	// fault cut may run in a later slot (its retry), so jobs are matched by
	// key, not by the slot their alert names.
	var gapSlots, gapJobs, gapLater int
	var gapWorst time.Duration
	for k := range spread {
		slot := s.grid.Add(w.first, k)
		if slot.Before(cut) || slot.After(firstCheck) {
			continue
		}
		var (
			got, later int
			worst      time.Duration
		)
		if err := s.store.Pool().QueryRow(ctx, `SELECT count(DISTINCT entity_key), count(*) FILTER (WHERE slot > $3), coalesce(max(written_at) - $3, '0')
			FROM fault_alerts WHERE stage = 1 AND CASE WHEN entity_key ~ '^[0-9]+$' THEN entity_key::int % $1 END = $2`,
			spread, k, slot).Scan(&got, &later, &worst); err != nil {
			t.Fatal(err)
		}
		if got != w.perSlot[slot] {
			t.Fatalf("slot %s, due during the %s: %d of its %d jobs checked", slot.Format("15:04:05"), kind, got, w.perSlot[slot])
		}
		gapSlots++
		gapJobs += got
		gapLater += later
		gapWorst = max(gapWorst, worst)
	}
	if gapSlots == 0 {
		t.Fatalf("no slot came due during the %s: the test proved nothing", kind)
	}
	// A crash cuts the slot it lands in; a switchover, which takes seconds
	// to drain the primary, only starts in one.
	if kind == "failover" && oldDone >= w.perSlot[cut] {
		t.Fatalf("slot %s had finished on the old primary before the %s: it did not land mid-slot", cut.Format("15:04:05"), kind)
	}
	acked, failed, failedCommitted := live.check(t, s)

	what := fmt.Sprintf("SIGKILL to %s's keeper, postmaster (pid %d) and backends in the middle of slot %s (%d of its %d checks committed before)",
		old.name, pid, cut.Format("15:04:05"), oldDone, w.perSlot[cut])
	if kind == "switchover" {
		what = fmt.Sprintf("pg_autoctl perform switchover from %s started in the middle of slot %s", old.name, cut.Format("15:04:05"))
	}
	t.Logf("%s: %s; %s (:%d) primary after %s; first check on it %s after the fault",
		kind, what, newPrimary.name, newPrimary.port,
		promoted.Round(10*time.Millisecond), firstCheck.Sub(faultAt).Round(10*time.Millisecond))
	t.Logf("%s: not ready (first 503 → first 200 again, from the fault): %s; both servers kept running and heartbeat on the new primary",
		kind, strings.Join(windows, ", "))
	t.Logf("%s: %d slots due from the cut slot to the first check on the new primary, %d jobs, all checked (%d of them in a later slot, retried after the fault cut their check), the last %s after its slot",
		kind, gapSlots, gapJobs, gapLater, gapWorst.Round(time.Millisecond))
	t.Logf("%s: scheduling through it: %d calls acknowledged, all fired once; %d failed (%d of those had committed and fired once, the rest never existed)",
		kind, acked, failed, failedCommitted)
	t.Logf("%s: %v; test took %s", kind, fig, time.Since(began).Round(time.Second))
}

// midSlot polls the database until a slot at or after from has begun
// firing, some of its checks have committed and it has not finished, and
// returns it.
func (s *servers) midSlot(from time.Time) time.Time {
	s.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		var slot *time.Time
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.store.Pool().QueryRow(ctx, `SELECT min(l.slot) FROM prescient_slots l
			WHERE l.slot >= $1 AND l.finished_at IS NULL AND EXISTS (SELECT FROM fault_alerts a WHERE a.slot = l.slot AND a.stage = 1)`, from).Scan(&slot)
		cancel()
		if err == nil && slot != nil {
			return slot.UTC()
		}
		time.Sleep(2 * time.Millisecond) // polling an external process
	}
	s.t.Fatalf("no slot from %s was being fired within 30s\n%s", from.Format("15:04:05"), s.logTails())
	return time.Time{}
}

func (s *servers) count(query string, args ...any) (int, error) {
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.store.Pool().QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// liveScheduler schedules one job at a time, as an application would, for
// the whole of a fault, and remembers which calls were acknowledged.
type liveScheduler struct {
	mu     sync.Mutex
	until  time.Time // zero: not told yet
	acked  []string
	failed []string
	done   chan struct{}
}

// scheduleThrough starts scheduling jobs (entity "live", due a second
// later) every 50ms, each call with a 3s deadline, from now until told to
// stop.
func (s *servers) scheduleThrough() *liveScheduler {
	l := &liveScheduler{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			l.mu.Lock()
			stop := !l.until.IsZero() && time.Now().After(l.until)
			l.mu.Unlock()
			if stop {
				return
			}
			key := fmt.Sprintf("live-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err := s.client.Schedule(ctx, prescient.ScheduleParams{Entity: "live", Key: key, Check: "fault", At: time.Now().Add(time.Second)})
			cancel()
			l.mu.Lock()
			if err == nil {
				l.acked = append(l.acked, key)
			} else {
				l.failed = append(l.failed, key)
			}
			l.mu.Unlock()
			time.Sleep(50 * time.Millisecond) // the application's pace, not synchronisation
		}
	}()
	return l
}

// stopAfter tells the scheduler to stop once t has passed (the earliest
// time it is given).
func (l *liveScheduler) stopAfter(t time.Time) {
	l.mu.Lock()
	if l.until.IsZero() || t.Before(l.until) {
		l.until = t
	}
	l.mu.Unlock()
}

// check waits for the scheduler to stop and verifies: every acknowledged
// job fired exactly once; every failed call fired at most once. It returns
// the counts.
func (l *liveScheduler) check(t *testing.T, s *servers) (acked, failed, failedCommitted int) {
	t.Helper()
	<-l.done
	counts := map[string]int{}
	rows, err := s.store.Pool().Query(context.Background(), "SELECT entity_key, count(*) FROM fault_alerts WHERE entity_key LIKE 'live-%' GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		counts[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, k := range l.acked {
		if counts[k] != 1 {
			lost = append(lost, fmt.Sprintf("%s fired %d times", k, counts[k]))
		}
	}
	for _, k := range l.failed {
		switch counts[k] {
		case 0:
		case 1:
			failedCommitted++
		default:
			lost = append(lost, fmt.Sprintf("%s (not acknowledged) fired %d times", k, counts[k]))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("schedule calls made through the fault: %s", strings.Join(lost, "; "))
	}
	if len(l.failed) == 0 {
		t.Fatal("no schedule call failed during the fault: the database was never away, the test proved nothing")
	}
	if len(l.acked) == 0 {
		t.Fatal("no schedule call was acknowledged")
	}
	return len(l.acked), len(l.failed), failedCommitted
}
