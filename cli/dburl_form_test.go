package cli

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Key=value settings whose value holds "://" (a password, an
// application_name that is a URL) are valid settings pgx connects with;
// the form check cut the value at its first "://" and took what came
// before for a URL scheme, refusing them (found by a review). A scheme is
// now read at the start only, as pgx reads it.
func TestDatabaseURLKeyValueWithSchemeInAValue(t *testing.T) {
	for _, url := range []string{
		"host=db.internal dbname=app user=app password=s3cr://et",
		"host=db.internal dbname=app application_name=https://example.com/app",
	} {
		if _, err := pgconn.ParseConfig(url); err != nil {
			t.Fatalf("pgconn refuses %q: %v", url, err)
		}
		cfg, err := loadConfig(writeConfig(t, "database:\n  url: \""+url+"\"\n"), noEnv)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("key=value settings %q, which pgx accepts: %v", url, err)
		}
	}
}

// A value the form check passes should be one pgx can parse: an upper-case
// scheme is not a URL to pgx (nor to libpq), and a PRESCIENT_DATABASE_URL
// with a space before the scheme failed only once a command connected (the
// check trimmed it; found by a review). The check reads the value as pgx
// does now.
func TestDatabaseURLFormRefusesWhatPgxRefuses(t *testing.T) {
	for _, url := range []string{
		"POSTGRES://app@db.internal/app",
		" postgres://app@db.internal/app",
		// With a query, pgx reads such a value as key=value settings, one
		// odd key before the "=", and connects to the local socket: a URL
		// behind spaces is refused too (found by a review).
		" postgres://app@db.internal/app?sslmode=disable",
		"\tpostgresql://app@db.internal:5432/app?sslmode=require",
	} {
		cfg, err := loadConfig(writeConfig(t, "workers: 2\n"), envOf(map[string]string{EnvDatabaseURL: url}))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "database.url") {
			pc, perr := pgconn.ParseConfig(cfg.Database.URL)
			t.Errorf("database.url %q passes the configuration check (pgx: %v, %v)", cfg.Database.URL, pc, perr)
		}
	}
}
