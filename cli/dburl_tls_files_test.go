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
// with "database.url: cannot parse ..." (found by a review). Only the
// value's form is checked there now.
func TestSlotsNeedsNoTLSFilesTheURLNames(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://app@db.internal:5432/app?sslmode=verify-full&sslrootcert=/etc/prescient/ca.pem",
		// The key=value form was still parsed after the URL form no
		// longer was (found by a review); now neither is.
		"host=db.internal port=5432 dbname=app user=app sslmode=verify-full sslrootcert=/etc/prescient/ca.pem",
	} {
		h := &harness{t: t, env: map[string]string{EnvDatabaseURL: url}}
		if out, err := h.run("slots"); err != nil {
			t.Errorf("prescient slots with %q, whose CA file is on the servers only: %v\noutput:\n%s", url, err, out)
		}
	}
}
