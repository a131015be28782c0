package cli

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
)

// TestDemo runs `prescient demo` for real (about 10 to 15 seconds of slots)
// on PostgreSQL and checks its story: one order ships, one is cancelled, one
// alerts and then escalates exactly once, and the schema is gone afterwards.
func TestDemo(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: pgtest.URL()}}
	out, err := h.run("demo")
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out)
	}
	checkDemoStory(t, out)
	m := regexp.MustCompile(`dropped schema (prescient_demo_[0-9a-f]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("output does not say the schema was dropped:\n%s", out)
	}
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, m[1]).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists after the demo", m[1])
	}
}

// TestDemoOnSQLite runs the demo with no database configured: the first run
// on a fresh machine, on a throwaway SQLite file that is removed afterwards.
func TestDemoOnSQLite(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	out, err := h.run("demo")
	if err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out)
	}
	checkDemoStory(t, out)
	m := regexp.MustCompile(`removed (\S+demo\.db)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "using a fresh SQLite file") {
		t.Fatalf("output does not say it used and removed a SQLite file:\n%s", out)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after the demo (%v)", m[1], err)
	}
}

// checkDemoStory checks the narration and the tables the demo prints: the
// Go check and the check declared in SQL each alert and escalate once for
// the order that stays unshipped, and nothing for the others; the receiver
// gets each of the four events once, with a good signature, after a 503
// that made prescient send one of them again.
func checkDemoStory(t *testing.T, out string) {
	t.Helper()
	for _, c := range []struct {
		line string
		n    int
	}{
		{"order unshipped: alert raised order=1001", 1},
		{"order unshipped: escalation raised order=1001", 1},
		{"alert raised", 1},
		{"escalation raised", 1},
		{"shipped order 1002: resolve(order, 1002, shipped) settled 1 pending check(s)", 1},
		{"order 1003 was cancelled: cancel(order, 1003) removed 1 pending check(s)", 1},
		{"check order_unshipped #1 of order 1001", 1},
		{"check order_unshipped #2 of order 1001", 1},
		{"of order 1002", 0},
		{"of order 1003", 0},
		{"delivery: delivery failed, will retry sink=receiver", 1}, // the 503, at WARN
		{"failed", 1},
		{"declared a check in SQL, no Go", 1},
		{"prepared its query: it returns key, placed_at", 1},
		{"declared check order_unshipped_sql, one query for 1 job(s): order 1004", 2},
		{"check order_unshipped_sql of order 1004 asks to run again", 1},
		{"check order_unshipped_sql of order 1004 is done", 1},
		{"shipped order 1005: resolve(order, 1005, shipped) settled 1 pending check(s)", 1},
		{"of order 1005", 0},
		{"receiver: answered 503 to order.unshipped of order ", 1},
		{"receiver: got order.unshipped (warning) of order 1001 from check order_unshipped, ", 1},
		{"receiver: got order.unshipped.escalated (critical) of order 1001 from check order_unshipped, ", 1},
		{"receiver: got order.unshipped (warning) of order 1004 from check order_unshipped_sql, ", 1},
		{"receiver: got order.unshipped.escalated (critical) of order 1004 from check order_unshipped_sql, ", 1},
		{"signature ok", 4},
		{"bad signature", 0},
	} {
		if got := strings.Count(out, c.line); got != c.n {
			t.Errorf("output has %q %d time(s), want %d:\n%s", c.line, got, c.n, out)
		}
	}
	_, tables, ok := strings.Cut(out, "\nhistory:\n")
	if !ok {
		t.Fatalf("no history table in the output:\n%s", out)
	}
	for _, re := range []string{
		`order\s+1001\s+order_unshipped\s+done\s+2\s`,
		`order\s+1002\s+order_unshipped\s+resolved\s+0\s`,
		`order\s+1003\s+order_unshipped\s+cancelled\s+0\s`,
		`order\s+1004\s+order_unshipped_sql\s+done\s+2\s`,
		`order\s+1005\s+order_unshipped_sql\s+resolved\s+0\s`,
		`(?s)alerts \(written by order_unshipped\):\nORDER\s+STAGE\s+RAISED AT\n1001\s+alert\s+\S+\n1001\s+escalation\s+\S+\n\n`,
		`1001\s+order_unshipped\s+order.unshipped\s+alert\s+warning\s+receiver\s+delivered\s+[12]\n`,
		`1001\s+order_unshipped\s+order.unshipped.escalated\s+escalation\s+critical\s+receiver\s+delivered\s+1\n`,
		`1004\s+order_unshipped_sql\s+order.unshipped\s+alert\s+warning\s+receiver\s+delivered\s+[12]\n`,
		`1004\s+order_unshipped_sql\s+order.unshipped.escalated\s+escalation\s+critical\s+receiver\s+delivered\s+1\n`,
	} {
		if !regexp.MustCompile(re).MatchString(tables) {
			t.Errorf("tables do not match %s:\n%s", re, tables)
		}
	}
	// The 503 made one delivery take a second attempt, and only one.
	if n := len(regexp.MustCompile(`receiver\s+delivered\s+2\n`).FindAllString(tables, -1)); n != 1 {
		t.Errorf("%d deliveries took 2 attempts, want 1:\n%s", n, tables)
	}
}

func TestDemoUnreachable(t *testing.T) {
	h := &harness{t: t, env: map[string]string{EnvDatabaseURL: "postgres://root:secret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2"}}
	_, err := h.run("demo")
	if err == nil {
		t.Fatal("demo against a closed port: no error")
	}
	for _, w := range []string{"cannot reach PostgreSQL at postgres://root:xxxxx@127.0.0.1:1/", EnvDatabaseURL} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error %q shows the password", err)
	}
}
