package cli

import (
	"testing"
)

// README: "prescient slots [--json] | the grid, the ownership table;
// validates the configuration (needs no database)". The check that
// database.url is a PostgreSQL URL ran pgconn.ParseConfig, which does more
// than parse: it reads the TLS files the URL names (sslrootcert, sslcert,
// sslkey). A production URL whose CA file lives only on the servers
// (sslmode=verify-full) failed `prescient slots` (and every other
// command's configuration check) where the configuration was checked,
// with "database.url: cannot parse ..." (found by a review). Only a value
// that is not a postgres:// URL is parsed there now.
func TestSlotsNeedsNoTLSFilesTheURLNames(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{
		EnvDatabaseURL: "postgres://app@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/prescient/ca.pem",
	}}
	if out, err := h.run("slots"); err != nil {
		t.Fatalf("prescient slots with a verify-full URL whose CA file is on the servers only: %v\noutput:\n%s", err, out)
	}
}
