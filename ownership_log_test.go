package prescient_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
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
