package hatest

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// TestReplicationModes shows, on the formation, what a schedule call's
// acknowledgement is worth with synchronous and with asynchronous
// replication, by freezing the primary's WAL sender (SIGSTOP) so that
// nothing more reaches the secondary:
//
//   - synchronous (pg_auto_failover's default for a primary and one
//     secondary): the call does not return while the secondary has not
//     received the commit; an acknowledged job is on both nodes;
//   - asynchronous (the secondary's replication-quorum false): the call is
//     acknowledged at once, the primary dies, the secondary is promoted
//     without it, and the acknowledged job is gone.
func TestReplicationModes(t *testing.T) {
	f := pair(t)
	ctx := context.Background()
	primary, err := f.primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	secondary := f.nodes[0]
	if secondary == primary {
		secondary = f.nodes[1]
	}
	schema := fmt.Sprintf("ha_replication_%d", time.Now().UnixNano())
	st, err := postgres.Open(ctx, f.URL(), &postgres.Opts{Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	client, err := prescient.NewClient(st, &prescient.Config{Server: "scheduler", Grid: slots.Grid{Resolution: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	schedule := func(key string, limit time.Duration) (time.Duration, error) {
		sctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		began := time.Now()
		_, err := client.Schedule(sctx, prescient.ScheduleParams{Entity: "order", Key: key, Check: "fault", At: time.Now().Add(time.Hour)})
		return time.Since(began), err
	}
	// has reports whether the job with key is in node n's table.
	has := func(n *node, key string) (bool, error) {
		c, err := connect(ctx, n.URL())
		if err != nil {
			return false, err
		}
		defer c.Close(ctx)
		var ok bool
		err = c.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT FROM %s.prescient_jobs WHERE entity_key = $1)", schema), key).Scan(&ok)
		return ok, err
	}
	// Both nodes have the schema before the receiver is frozen.
	if took, err := schedule("before", 10*time.Second); err != nil {
		t.Fatalf("schedule with both nodes up: %v (%s)", err, took)
	}
	waitHas(t, has, secondary, "before")

	// Synchronous: no acknowledgement while nothing reaches the secondary.
	thaw := freezeSender(t, primary)
	took, err := schedule("sync", 3*time.Second)
	if err == nil {
		t.Fatalf("synchronous replication: a schedule call was acknowledged after %s while nothing reached the secondary", took)
	}
	local, _ := has(primary, "sync")
	thaw()
	waitHas(t, has, secondary, "sync")
	t.Logf("synchronous: with the primary's WAL sender stopped, schedule returned no acknowledgement within its 3s deadline (%v); committed on the primary: %v; once the sender ran again the job reached the secondary",
		err, local)

	// Asynchronous: acknowledged at once, lost in the failover.
	if out, err := f.autoctl(ctx, "set", "node", "replication-quorum", "false", "--pgdata", secondary.pgdata); err != nil {
		t.Fatalf("pg_autoctl set node replication-quorum false: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// Back to synchronous for the tests after this one.
		if out, err := f.autoctl(context.Background(), "set", "node", "replication-quorum", "true", "--pgdata", secondary.pgdata); err != nil {
			t.Errorf("pg_autoctl set node replication-quorum true: %v\n%s", err, out)
		}
	})
	waitSetting(t, primary, "synchronous_standby_names", "")
	thaw = freezeSender(t, primary)
	took, err = schedule("async", 3*time.Second)
	if err != nil {
		t.Fatalf("asynchronous replication: schedule failed with the WAL sender stopped: %v", err)
	}
	if ok, err := has(primary, "async"); !ok || err != nil {
		t.Fatalf("the acknowledged job is not on the primary: %v %v", ok, err)
	}
	// The whole node dies, the stopped WAL sender with it.
	_, killed, err := f.crash(primary)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	promoted, err := f.waitPrimary(pctx, primary)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if promoted != secondary {
		t.Fatalf("promoted %s, want %s", promoted.name, secondary.name)
	}
	lost, err := has(secondary, "async")
	if err != nil {
		t.Fatal(err)
	}
	if lost {
		t.Fatal("asynchronous replication: the job acknowledged before the failover survived it: the WAL sender was not stopped, the test proved nothing")
	}
	if ok, err := has(secondary, "sync"); !ok || err != nil {
		t.Fatalf("the job replicated before the freeze is missing on the new primary: %v %v", ok, err)
	}
	t.Logf("asynchronous: schedule acknowledged in %s with the WAL sender stopped; the primary crashed, %s was promoted %s later without the job: an acknowledged schedule lost",
		took.Round(time.Millisecond), secondary.name, time.Since(killed).Round(10*time.Millisecond))
}

// freezeSender stops (SIGSTOP) the WAL sender of primary n, so that no more
// WAL leaves it, and returns the function that lets it run again (also
// called when the test ends).
func freezeSender(t *testing.T, n *node) (thaw func()) {
	t.Helper()
	ctx := context.Background()
	var pid int
	end := time.Now().Add(20 * time.Second)
	for {
		c, err := connect(ctx, n.URL())
		if err == nil {
			err = c.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'").Scan(&pid)
			c.Close(ctx)
		}
		if err == nil && pid > 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%s has no streaming WAL sender: %v", n.name, err)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop %s's WAL sender (pid %d): %v", n.name, pid, err)
	}
	done := false
	thaw = func() {
		// Only while it is still that node's process: after a crash the
		// pid may name another.
		if !done && slices.Contains(processesIn(n.pgdata), pid) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		done = true
	}
	t.Cleanup(thaw)
	return thaw
}

// waitHas polls node n until it has the job with key.
func waitHas(t *testing.T, has func(*node, string) (bool, error), n *node, key string) {
	t.Helper()
	end := time.Now().Add(20 * time.Second)
	for {
		ok, err := has(n, key)
		if ok {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("job %s not on %s within 20s (%v)", key, n.name, err)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
}

// waitSetting polls node n until its setting name has the value want.
func waitSetting(t *testing.T, n *node, name, want string) {
	t.Helper()
	ctx := context.Background()
	end := time.Now().Add(20 * time.Second)
	var got string
	for {
		c, err := connect(ctx, n.URL())
		if err == nil {
			err = c.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got)
			c.Close(ctx)
		}
		if err == nil && got == want {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s's %s is %q, not %q, after 20s (%v)", n.name, name, got, want, err)
		}
		time.Sleep(50 * time.Millisecond) // polling an external process
	}
}
