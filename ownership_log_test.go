package prescient_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/slots"
)

// A server missing from the static ownership map is warned of, naming it
// once: the line named it twice (server=vm server=vm), which a JSON log
// reader takes as a duplicate key (found trying the README as a new user).
func TestNotInStaticMapWarnsNamingTheServerOnce(t *testing.T) {
	h := openSQLite(t)
	var buf bytes.Buffer
	c := h.client(newClock("2026-03-10T10:00:00Z"), observedRegistry(t), func(cfg *prescient.Config) {
		cfg.Server = "vm"
		cfg.Ownership = slots.Ownership{"a": {0, 1, 2, 3}}
		cfg.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
	})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.SplitSeq(buf.String(), "\n") {
		if strings.Contains(l, "not in the static ownership map") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no warning that the server is not in the static map:\n%s", buf.String())
	}
	if n := strings.Count(line, `"server":`); n != 1 {
		t.Errorf("the warning names the server %d times, want once: %s", n, line)
	}
}

// A server started under the name of a live one is warned of: the two
// share one registration, one ledger row per slot and one name in history
// (found by a new user's trial: two clients in one process, both named for
// the host). After the first stops (it deregisters), no warning.
func TestStartWarnsOfANameTaken(t *testing.T) {
	h := openSQLite(t)
	ctx := context.Background()
	clk := newClock("2026-03-10T10:00:00Z")
	start := func() (*prescient.Client, string) {
		t.Helper()
		buf := &lockedBuffer{}
		c := h.client(clk, observedRegistry(t), func(cfg *prescient.Config) {
			cfg.Server = "vm"
			cfg.Logger = slog.New(slog.NewJSONHandler(buf, nil))
		})
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return c, buf.String()
	}
	first, logs := start()
	if strings.Contains(logs, "registered under this server's name already") {
		t.Errorf("the first server warns of its own name:\n%s", logs)
	}
	second, logs := start()
	if !strings.Contains(logs, `"level":"WARN","msg":"a live server is registered under this server's name already`) {
		t.Errorf("a second server named vm beside a live one: no warning\n%s", logs)
	}
	for _, c := range []*prescient.Client{second, first} {
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	third, logs := start()
	defer third.Stop(ctx)
	if strings.Contains(logs, "registered under this server's name already") {
		t.Errorf("a server named vm after the others stopped warns:\n%s", logs)
	}
}

// lockedBuffer is a bytes.Buffer that a logger's goroutines may write to
// while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
