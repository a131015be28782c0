package postgres_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// A database not encoded in UTF-8 is refused by Open and by Migrate (on a
// pool the caller made): pgx writes Go's UTF-8 bytes whatever the
// connection declares, so "café" would be stored as other characters.
func TestNonUTF8DatabaseRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Database(t, "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	s, err := postgres.Open(ctx, url, nil)
	if err == nil {
		s.Close()
		t.Fatal("Open on a LATIN1 database: no error")
	}
	if !errors.Is(err, postgres.ErrEncoding) || !strings.Contains(err.Error(), "encoded in LATIN1") || !strings.Contains(err.Error(), "ENCODING 'UTF8'") {
		t.Errorf("Open on a LATIN1 database: %v; want ErrEncoding naming LATIN1 and what to do", err)
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	err = postgres.New(pool, nil).Migrate(ctx)
	if !errors.Is(err, postgres.ErrEncoding) || !strings.HasPrefix(err.Error(), "migrate: ") {
		t.Errorf("Migrate on a LATIN1 database: %v; want ErrEncoding", err)
	}
	var tables int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'prescient%'`).Scan(&tables); err != nil || tables != 0 {
		t.Errorf("%d prescient tables after the refused Migrate (%v), want none", tables, err)
	}
}

// A client_encoding other than UTF8 is refused when the URL asks for it,
// and overridden when the database (or the role) merely defaults to it: a
// key written from Go reads the same from SQL.
func TestClientEncodingIsUTF8(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Database(t, "ENCODING 'UTF8' TEMPLATE template0")
	if s, err := postgres.Open(ctx, pgtest.WithParam(url, "client_encoding=LATIN1"), nil); err == nil {
		s.Close()
		t.Error("Open with client_encoding=LATIN1 in the URL: no error")
	} else if !errors.Is(err, postgres.ErrEncoding) || !strings.Contains(err.Error(), "client_encoding is LATIN1") {
		t.Errorf("Open with client_encoding=LATIN1 in the URL: %v; want ErrEncoding naming it", err)
	}

	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET client_encoding = %L', current_database(), 'LATIN1'); END $$`); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, url, nil)
	if err != nil {
		t.Fatalf("Open on a database defaulting to LATIN1 connections: %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.JobSchedule(ctx, nil, []*driver.JobScheduleParams{{Entity: "order", Key: "café", Check: "c", At: at, Now: at}}); err != nil {
		t.Fatal(err)
	}
	// Read as bytes, whatever this connection's encoding.
	var key []byte
	var chars int
	if err := admin.QueryRow(ctx, `SELECT convert_to(entity_key, 'UTF8'), length(entity_key) FROM prescient_jobs`).Scan(&key, &chars); err != nil {
		t.Fatal(err)
	}
	if string(key) != "café" || chars != 4 {
		t.Errorf("key stored as %q (%d characters), want café (4)", key, chars)
	}
}
