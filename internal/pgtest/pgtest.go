// Package pgtest gives each test its own schema in a real PostgreSQL
// database, so that storage tests run in parallel and never see each other's
// rows.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	neturl "net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// URLEnv names the environment variable holding the URL of the database the
// tests use. The role needs the right to create schemas in it, and to create
// databases (CREATEDB) for the tests that need one of their own (Database).
const URLEnv = "PRESCIENT_TEST_DATABASE_URL"

// URLDefault is the database used when URLEnv is unset.
const URLDefault = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the test database's URL: $PRESCIENT_TEST_DATABASE_URL, or
// URLDefault.
func URL() string {
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	return URLDefault
}

// Schema creates an empty schema with a name unique to this test run and
// returns the database URL and the schema's name. The schema and everything
// in it are dropped when the test ends; close pools on it in cleanups
// registered after Schema, so that they run first. If the server cannot be
// reached, the test fails saying how to point it at one.
func Schema(t testing.TB) (url, schema string) {
	t.Helper()
	url, schema = SchemaName(t)
	exec(t, url, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	return url, schema
}

// SchemaName is Schema without creating the schema: it reserves a unique
// name, for tests of code that creates the schema itself, and still drops the
// schema, if it exists, when the test ends.
func SchemaName(t testing.TB) (url, schema string) {
	t.Helper()
	url = URL()
	schema = uniqueName(t)
	exec(t, url, "SELECT 1")
	t.Cleanup(func() {
		exec(t, url, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return url, schema
}

// Database creates a database with a name unique to this test run, with the
// options of CREATE DATABASE given (such as "ENCODING 'LATIN1'"), and
// returns its URL: the test database's URL naming it instead. It is dropped
// when the test ends; close pools on it in cleanups registered after
// Database, so that they run first.
func Database(t testing.TB, options string) string {
	t.Helper()
	admin := URL()
	name := uniqueName(t)
	exec(t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" "+options)
	t.Cleanup(func() {
		exec(t, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := neturl.Parse(admin)
	if err != nil {
		t.Fatalf("pgtest: bad database URL %q (from $%s or the default): %v", admin, URLEnv, err)
	}
	u.Path = "/" + name
	return u.String()
}

// Role creates a role that may log in and nothing more, with a name unique
// to this test run, and returns url (a database URL) with that role as its
// user. The role is dropped when the test ends, with whatever it was granted
// in the test database; close pools on it in cleanups registered after Role.
func Role(t testing.TB, url string) string {
	t.Helper()
	name := uniqueName(t)
	exec(t, URL(), "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN")
	t.Cleanup(func() {
		exec(t, URL(), "DROP OWNED BY "+pgx.Identifier{name}.Sanitize())
		exec(t, URL(), "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatalf("pgtest: bad database URL %q: %v", url, err)
	}
	u.User = neturl.User(name)
	return u.String()
}

// WithParam returns url with the query parameter param ("key=value") added.
func WithParam(url, param string) string {
	if strings.Contains(url, "?") {
		return url + "&" + param
	}
	return url + "?" + param
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueName is "t_", a few characters of the test's name for whoever reads
// the database, and a random suffix, within PostgreSQL's 63-byte limit.
func uniqueName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("pgtest: random schema name: %v", err)
	}
	name := strings.Trim(unsafe.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

// exec runs one statement on a short-lived connection.
func exec(t testing.TB, url, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest: bad database URL %q (from $%s or the default): %v", url, URLEnv, err)
	}
	cfg.ConnectTimeout = 5 * time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: cannot connect to PostgreSQL at %s:%d: %v\n"+
			"Storage tests need a real server: start one there, or set %s to the URL of a database "+
			"where this role may create schemas (e.g. postgres://user:pass@host:5432/db?sslmode=disable).",
			cfg.Host, cfg.Port, err, URLEnv)
	}
	defer conn.Close(ctx)
	// A statement PostgreSQL chose as a deadlock's victim is run again: a
	// schema's DROP at a test's end can meet the sessions of server
	// processes the test has just killed, which run their last statement
	// to its end before they notice (a CI run failed so).
	for try := 1; ; try++ {
		_, err := conn.Exec(ctx, sql)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" && try < 5 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("pgtest: %s: %v", sql, err)
		}
		return
	}
}
