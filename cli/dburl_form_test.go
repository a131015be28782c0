package cli

import (
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
	} {
		cfg, err := loadConfig(writeConfig(t, "workers: 2\n"), envOf(map[string]string{EnvDatabaseURL: url}))
		if err != nil {
			t.Fatal(err)
		}
		_, perr := pgconn.ParseConfig(cfg.Database.URL)
		if err := cfg.Validate(); perr != nil && err == nil {
			t.Errorf("database.url %q passes the configuration check, but pgx refuses it: %v", cfg.Database.URL, perr)
		}
	}
}
