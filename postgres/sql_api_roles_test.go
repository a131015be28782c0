package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// adminExec runs statements as the test database's own (admin) role.
func adminExec(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func userOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.User.Username()
}

// PostgreSQL's recommended secure pattern (and the one PostgreSQL 15 leaves,
// public being no longer writable by every role): a role of its own for
// prescient, owning a schema of the same name, found through the default
// search_path "$user", public. With database.schema empty, `prescient
// migrate` puts the tables there, and the SQL functions save the
// search_path as the text `"$user", public` (SET search_path FROM CURRENT),
// which names the *calling* role's schema when an application's role calls
// them. So the SQL API, called by its qualified name as the README says,
// works for the role that migrated and for no other: it finds no
// prescient_settings.
func TestSQLFunctionsCalledByAnotherRoleWithUserSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	base := pgtest.URL()
	ownerURL := pgtest.Role(t, base)
	appURL := pgtest.Role(t, base)
	owner, app := userOf(t, ownerURL), userOf(t, appURL)
	qo, qa := pgx.Identifier{owner}.Sanitize(), pgx.Identifier{app}.Sanitize()
	// The schema "$user" names for the owner role, as a DBA creates it.
	adminExec(t, "CREATE SCHEMA "+qo+" AUTHORIZATION "+qo)

	s, err := postgres.Open(ctx, ownerURL, &postgres.Opts{MaxConns: 4}) // database.schema empty
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate as %s: %v", owner, err)
	}
	if err := s.GridSave(ctx, slots.Grid{Resolution: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var where string
	if err := s.Pool().QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'prescient_jobs'::regclass`).Scan(&where); err != nil || where != owner {
		t.Fatalf("prescient_jobs in schema %q, %v; want the owner's own schema %q", where, err, owner)
	}
	at := time.Now().Add(time.Hour)
	// The role that migrated can call the functions.
	if _, err := s.Pool().Exec(ctx, `SELECT prescient_schedule('order', '0', 'unshipped', $1)`, at); err != nil {
		t.Fatalf("prescient_schedule as the owner: %v", err)
	}
	// The application's role, given what it needs to use them.
	adminExec(t, "GRANT USAGE ON SCHEMA "+qo+" TO "+qa+"; "+
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "+qo+" TO "+qa+"; "+
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA "+qo+" TO "+qa)
	conn, err := pgx.Connect(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var got time.Time
	if err := conn.QueryRow(ctx, `SELECT `+qo+`.prescient_schedule('order', '1', 'unshipped', $1)`, at).Scan(&got); err != nil {
		t.Fatalf("%s.prescient_schedule called by the application's role %s: %v", qo, app, err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT `+qo+`.prescient_cancel('order', '1')`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%s.prescient_cancel called by the application's role: %d, %v; want 1", qo, n, err)
	}

	// An install migrated before migration 00012 kept "$user", public on
	// its functions; migrating again repairs them.
	if _, err := providerOf(t, s).DownTo(ctx, 11); err != nil {
		t.Fatalf("migrate down to 11: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, `DO $$
		DECLARE f regprocedure;
		BEGIN
			FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
				WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND p.proname LIKE 'prescient\_%' AND p.proconfig IS NOT NULL
			LOOP
				EXECUTE format('ALTER FUNCTION %s SET search_path = "$user", public', f);
			END LOOP;
		END $$`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT `+qo+`.prescient_cancel('order', '0')`).Scan(&n); err == nil {
		t.Fatalf("the functions as an install before 00012 left them: the application's role cancelled %d, want an error", n)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT `+qo+`.prescient_cancel('order', '0')`).Scan(&n); err != nil || n != 1 {
		t.Errorf("after migrating again, %s.prescient_cancel called by the application's role: %d, %v; want 1", qo, n, err)
	}
}
