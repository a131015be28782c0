package cli

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A URL behind spaces is refused because pgx reads it as one odd
// key=value setting (the text before the query's "=") and connects to the
// default host. A URL whose scheme is not followed by "://" at the start
// (a JDBC URL, a "postgresql:/" typo) is read the same way, yet passed the
// form check, which took any value with an "=" and no scheme at its start
// for key=value settings (found by a review). Settings must start with a
// keyword and "=" now.
func TestDatabaseURLOtherFormsRefused(t *testing.T) {
	for _, url := range []string{
		"jdbc:postgresql://db.internal:5432/app?user=app&password=secret",
		"postgresql:/app@db.internal/app?sslmode=require",
	} {
		pc, err := pgconn.ParseConfig(url)
		if err != nil {
			t.Fatalf("setup: pgx refuses %q: %v", url, err)
		}
		if strings.Contains(pc.Host, "db.internal") {
			t.Fatalf("setup: pgx read host %q from %q", pc.Host, url)
		}
		cfg, err := loadConfig(writeConfig(t, "workers: 2\n"), envOf(map[string]string{EnvDatabaseURL: url}))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "database.url") {
			t.Errorf("database.url %q passes the configuration check; pgx reads it as key=value settings %v, host %q (%v)",
				url, pc.RuntimeParams, pc.Host, err)
		}
	}
}

// A short database.url is refused in words of its own: the value is not
// replaced wherever it appears in the error (a URL of " " replaced every
// space of "is not a PostgreSQL URL" with a note that it may hold a
// password; found by a trial of bad input). A URL holding a password is
// still never echoed.
func TestDatabaseURLShortValueKeepsTheErrorReadable(t *testing.T) {
	for _, url := range []string{" ", "a", "is", "SQLite", "postgres:"} {
		cfg, err := loadConfig(writeConfig(t, "workers: 2\n"), envOf(map[string]string{EnvDatabaseURL: url}))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		if err == nil {
			t.Fatalf("database.url %q passes the configuration check", url)
		}
		if msg := err.Error(); strings.Contains(msg, notShown) || !strings.Contains(msg, "is not a PostgreSQL URL") {
			t.Errorf("database.url %q: %s", url, msg)
		}
	}
	cfg, err := loadConfig(writeConfig(t, "workers: 2\n"), envOf(map[string]string{EnvDatabaseURL: "jdbc:postgresql://app:s3cret@db/app"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a URL with a password: %v", err)
	}
}
