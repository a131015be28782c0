package cli

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// While run waits for the database, the API answers 503 "prescient is
// starting ... try again", but only to a request with the token: one with
// no token (or a wrong one) gets 401, as the README and httpapi promise,
// "before anything else is looked at". The first version of the 503 did
// not look at the token: a caller without it was told to retry, and
// learned that the database was not reached (found by a review).
func TestAPIStartingStillRefusesWithoutToken(t *testing.T) {
	t.Parallel()
	dbAddr := freeAddr(t) // nothing listens: run retries
	addr := freeAddr(t)
	cfg := writeConfig(t, "log: {format: json}\nslots: {resolution: 1s, cycle: 0s}\napi:\n  listen: "+addr+"\n")
	run := startAPIRun(t, map[string]string{EnvDatabaseURL: "postgres://root@" + dbAddr + "/postgres?sslmode=disable&connect_timeout=1",
		APITokenEnvDefault: apiTestToken}, cfg)
	for !strings.Contains(run.log.String(), "not ready, retrying") {
		select {
		case err := <-run.done:
			run.done <- err
			t.Fatalf("run returned %v while the database was down; logs:\n%s", err, run.log.String())
		case <-time.After(50 * time.Millisecond): // polling a log, not synchronising goroutines
		}
	}
	for _, auth := range []string{"", "Bearer not-the-token"} {
		req, err := http.NewRequest("POST", "http://"+addr+"/v1/cancel", strings.NewReader(`{"entity": "order", "key": "42"}`))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q while starting: %d %s (Retry-After %q); want 401 as once started",
				auth, res.StatusCode, strings.TrimSpace(string(raw)), res.Header.Get("Retry-After"))
		}
	}
}
