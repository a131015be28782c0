package sqlcheck

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"modernc.org/sqlite"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/postgres"
	sqlitestore "github.com/prescient-dev/prescient/sqlite"
)

// Dialect is the SQL a query is written in; it decides how the due keys are
// passed as $1.
type Dialect string

// Dialects.
const (
	// Postgres passes the keys as an array literal ('{"1","2"}'), which
	// reads as text[] or as an array of the key column's type.
	Postgres Dialect = "postgres"
	// SQLite passes the keys as a JSON array of strings (["1","2"]), read
	// with json_each($1).
	SQLite Dialect = "sqlite"
)

// Column is one result column of a prepared query.
type Column struct {
	Name string
	// Type is the column's type as the database names it ("timestamp with
	// time zone", "TIMESTAMP"); empty when the database does not say (an
	// SQLite expression).
	Type string
	// Time says the type holds a point in time (date, timestamp,
	// timestamptz); meaningful only when TypeKnown.
	Time bool
	// TypeKnown says the database states the type strictly (PostgreSQL).
	// SQLite's declared types are hints: a value is read as a time when it
	// is one.
	TypeKnown bool
	// Zoneless says the type is a timestamp without time zone or a date
	// (PostgreSQL): a wall-clock time (a date's is midnight), which
	// PostgreSQL reads in the session's TimeZone (Statement.Zone) when it
	// compares it with a point in time, and so does the check.
	Zoneless bool
	// JSON says the type is json or jsonb (PostgreSQL): the value goes to
	// the events' payload as written, numbers to the last digit.
	JSON bool
	// Padded says the type is character(n) (PostgreSQL), whose values come
	// padded with blanks that PostgreSQL ignores when it compares them: a
	// key is read without them.
	Padded bool
	// OID is the type's object id (PostgreSQL), 0 when unknown: a query
	// whose column comes back of another type is refused (see
	// Check.sameColumns).
	OID uint32
}

// Statement describes a query prepared against a database.
type Statement struct {
	Dialect Dialect
	Columns []Column
	// Zone is the time zone the database reads Zoneless columns in (the
	// PostgreSQL session's TimeZone); nil is UTC.
	Zone *time.Location
	// KeysType is the type the database reads $1 as, when it is an array
	// of integers ("bigint[]"; PostgreSQL): a key it would read as another
	// key's number (007 as 7) is refused (see Check.Batch). Empty otherwise.
	KeysType string
}

// Database prepares the queries of declared checks against a database.
type Database interface {
	// Dialect is the database's SQL dialect.
	Dialect() Dialect
	// Describe prepares query and runs it once with no keys in a read-only
	// transaction, and returns its result columns. A query the database
	// refuses, that does not take exactly the parameter $1, that writes or
	// that returns a row for no keys is a *QueryError; any other error
	// (the database cannot be reached) is returned as it is.
	Describe(ctx context.Context, query string) (*Statement, error)
}

// QueryError is a query the database refuses, or that cannot work as a
// declared check's: trying again will not help.
type QueryError struct {
	Err error
}

func (e *QueryError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *QueryError) Unwrap() error { return e.Err }

func queryErrorf(format string, args ...any) error {
	return &QueryError{Err: fmt.Errorf(format, args...)}
}

// ForStore returns the Database of a prescient store: *postgres.Store or
// *sqlite.Store. Queries run through the store's connections, so on
// PostgreSQL they see the tables of the store's search_path, as the checks
// do.
func ForStore(st prescient.Store) (Database, error) {
	switch s := st.(type) {
	case *postgres.Store:
		return NewPostgres(s.Pool()), nil
	case *sqlitestore.Store:
		return NewSQLite(s.DB()), nil
	}
	return nil, fmt.Errorf("sqlcheck: no dialect for a store of type %T (want *postgres.Store or *sqlite.Store)", st)
}

// NewPostgres returns the Database of a PostgreSQL pool.
func NewPostgres(pool *pgxpool.Pool) Database { return pgDatabase{pool} }

type pgDatabase struct{ pool *pgxpool.Pool }

func (pgDatabase) Dialect() Dialect { return Postgres }

// Type OIDs of the time types an anchor may have.
const (
	oidDate        = 1082
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidJSON        = 114
	oidJSONB       = 3802
	oidBpchar      = 1042
)

func (d pgDatabase) Describe(ctx context.Context, query string) (*Statement, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	sd, err := tx.Conn().PgConn().Prepare(ctx, "", query, nil)
	if err != nil {
		return nil, withDialectHint(pgQueryError("prepare", query, err), Postgres, query)
	}
	switch n := len(sd.ParamOIDs); {
	case n == 0:
		return nil, queryErrorf("the query takes no parameter: it must select the due keys passed as $1 (e.g. WHERE id = ANY($1))")
	case n > 1:
		return nil, queryErrorf("the query takes %d parameters ($1 to $%d): it takes one, $1, the due keys", n, n)
	}
	oids := []uint32{sd.ParamOIDs[0]}
	for _, f := range sd.Fields {
		oids = append(oids, f.DataTypeOID)
	}
	types, err := pgTypes(ctx, tx, oids)
	if err != nil {
		return nil, err
	}
	if p := types[sd.ParamOIDs[0]]; !p.array {
		return nil, queryErrorf("$1 is read as %s, not an array: it is the due keys, an array (write WHERE id = ANY($1))", p.name)
	}
	st := &Statement{Dialect: Postgres}
	switch p := types[sd.ParamOIDs[0]]; p.name {
	case "smallint[]", "integer[]", "bigint[]":
		st.KeysType = p.name
	}
	type zonelessColumn struct{ name, typ string }
	var zoneless []zonelessColumn
	for _, f := range sd.Fields {
		st.Columns = append(st.Columns, Column{
			Name:      f.Name,
			Type:      types[f.DataTypeOID].name,
			Time:      f.DataTypeOID == oidDate || f.DataTypeOID == oidTimestamp || f.DataTypeOID == oidTimestamptz,
			TypeKnown: true,
			Zoneless:  f.DataTypeOID == oidTimestamp || f.DataTypeOID == oidDate,
			JSON:      f.DataTypeOID == oidJSON || f.DataTypeOID == oidJSONB,
			Padded:    f.DataTypeOID == oidBpchar,
			OID:       f.DataTypeOID,
		})
		if f.DataTypeOID == oidTimestamp || f.DataTypeOID == oidDate {
			zoneless = append(zoneless, zonelessColumn{f.Name, types[f.DataTypeOID].name})
		}
	}
	if len(zoneless) > 0 {
		// PostgreSQL reads a timestamp without time zone in the session's
		// TimeZone (placed_at < now() - interval '3 hours' does), and so
		// must the check, or its stages fire hours off.
		var zone string
		if err := tx.QueryRow(ctx, `SELECT current_setting('TimeZone')`).Scan(&zone); err != nil {
			return nil, fmt.Errorf("read the session's TimeZone: %w", err)
		}
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, queryErrorf("column %s is a %s, which PostgreSQL reads in the session's TimeZone %q, "+
				"a zone this server cannot load (%v): cast it to timestamptz in the query (%s::timestamptz), or set TimeZone to a zone name",
				zoneless[0].name, zoneless[0].typ, zone, err, zoneless[0].name)
		}
		st.Zone = loc
	}
	// Described afresh, not through the connection's statement cache: a
	// connection that ran the query before its columns changed would
	// refuse it once ("cached plan must not change result type") when a
	// check prepares it again (Check.reprepare).
	rows, err := tx.Query(ctx, query, pgx.QueryExecModeDescribeExec, KeysArg(Postgres, nil))
	if err != nil {
		return nil, pgQueryError("run with no keys", query, err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, pgQueryError("run with no keys", query, err)
	}
	if n > 0 {
		return nil, noKeysError(n)
	}
	return st, nil
}

type pgType struct {
	name  string
	array bool
}

func pgTypes(ctx context.Context, tx pgx.Tx, oids []uint32) (map[uint32]pgType, error) {
	rows, err := tx.Query(ctx, `SELECT oid::int8, format_type(oid, NULL), typcategory = 'A' FROM pg_type WHERE oid = ANY($1::oid[])`, oids)
	if err != nil {
		return nil, fmt.Errorf("read the query's types: %w", err)
	}
	out := make(map[uint32]pgType)
	var (
		oid int64
		t   pgType
	)
	if _, err := pgx.ForEachRow(rows, []any{&oid, &t.name, &t.array}, func() error {
		out[uint32(oid)] = t
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the query's types: %w", err)
	}
	return out, nil
}

// pgQueryError is err from step as a *QueryError when PostgreSQL refused the
// query, and as it is when the database could not be used.
func pgQueryError(step, query string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code[:2] {
	case "08", "40", "53", "55", "57", "58":
		// Connection, rollback, resources, lock, shutdown, system: the
		// database, not the query.
		return err
	}
	if pe.Code == "25006" {
		return queryErrorf("%s: %w (the query must only read: it finds the keys still not there yet)", step, err)
	}
	if pe.Position > 0 {
		return queryErrorf("%s: %w, at line %d of the query", step, err, lineOf(query, int(pe.Position)))
	}
	return &QueryError{Err: fmt.Errorf("%s: %w", step, err)}
}

// lineOf returns the line (from 1) of the pos-th character (from 1) of s.
func lineOf(s string, pos int) int {
	line, i := 1, 1
	for _, r := range s {
		if i >= pos {
			break
		}
		if r == '\n' {
			line++
		}
		i++
	}
	return line
}

// NewSQLite returns the Database of an SQLite database.
func NewSQLite(db *sql.DB) Database { return liteDatabase{db} }

type liteDatabase struct{ db *sql.DB }

func (liteDatabase) Dialect() Dialect { return SQLite }

// paramRE finds the parameters of an SQLite query: $1, ?, ?2, :name,
// @name, $name.
var paramRE = regexp.MustCompile(`\$[0-9]+|\?[0-9]*|[:@$][A-Za-z_][A-Za-z0-9_]*`)

func (d liteDatabase) Describe(ctx context.Context, query string) (_ *Statement, err error) {
	if err := liteParams(query); err != nil {
		return nil, err
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	// A connection that answers only reads: a query that writes fails
	// (SQLite has no read-only transaction to run it in).
	if _, err := conn.ExecContext(ctx, "PRAGMA query_only = ON"); err != nil {
		return nil, err
	}
	defer func() {
		if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA query_only = OFF"); rerr != nil {
			// Never hand the pool a connection that refuses writes.
			_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
		}
	}()
	rows, err := conn.QueryContext(ctx, query, KeysArg(SQLite, nil))
	if err != nil {
		return nil, withDialectHint(liteQueryError("prepare", err), SQLite, query)
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, liteQueryError("prepare", err)
	}
	st := &Statement{Dialect: SQLite}
	for _, t := range types {
		st.Columns = append(st.Columns, Column{Name: t.Name(), Type: t.DatabaseTypeName()})
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, liteQueryError("run with no keys", err)
	}
	if n > 0 {
		return nil, noKeysError(n)
	}
	return st, nil
}

// liteParams checks that an SQLite query takes $1 and no other parameter:
// SQLite accepts an argument its statement does not use, so a query
// without $1 would otherwise return the same rows for any keys.
func liteParams(query string) error {
	var one bool
	for _, p := range paramRE.FindAllString(stripSQL(query), -1) {
		if p != "$1" {
			return queryErrorf("the query has the parameter %s: it takes one, $1, the due keys", p)
		}
		one = true
	}
	if !one {
		return queryErrorf("the query does not use $1: it must select the due keys passed as $1 " +
			"(e.g. WHERE id IN (SELECT value FROM json_each($1)))")
	}
	return nil
}

// stripSQL returns query without its comments and string literals, so
// that a $ inside them is not taken for a parameter.
func stripSQL(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		switch {
		case q[i] == '\'' || q[i] == '"':
			quote := q[i]
			for i++; i < len(q) && q[i] != quote; i++ {
			}
			b.WriteByte(' ')
		case strings.HasPrefix(q[i:], "--"):
			for i < len(q) && q[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case strings.HasPrefix(q[i:], "/*"):
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return b.String()
			}
			i += end + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(q[i])
		}
	}
	return b.String()
}

// liteQueryError is err from step as a *QueryError unless SQLite could not
// be used (busy, locked, out of memory or disk, input/output).
func liteQueryError(step string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case 5, 6, 7, 10, 13, 14: // BUSY, LOCKED, NOMEM, IOERR, FULL, CANTOPEN
			return err
		case 8: // READONLY
			return queryErrorf("%s: %w (the query must only read: it finds the keys still not there yet)", step, err)
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &QueryError{Err: fmt.Errorf("%s: %w", step, err)}
}

// The other store's way of reading the due keys ($1), in a query.
var (
	sqliteKeysRE   = regexp.MustCompile(`(?i)json_each\s*\(\s*\$1\b`)
	postgresKeysRE = regexp.MustCompile(`(?i)\bany\s*\(\s*\$1\b`)
)

// withDialectHint adds to a query error, from a query that reads $1 the
// other store's way (a configuration written for SQLite, run against
// PostgreSQL), how to read it on this one. Other errors are returned as
// they are.
func withDialectHint(err error, d Dialect, query string) error {
	var qe *QueryError
	if !errors.As(err, &qe) {
		return err
	}
	switch {
	case d == Postgres && sqliteKeysRE.MatchString(query):
		return &QueryError{Err: fmt.Errorf("%w (json_each($1) is SQLite's form: on PostgreSQL $1 is an array of the due keys, write WHERE id = ANY($1))", qe.Err)}
	case d == SQLite && postgresKeysRE.MatchString(query):
		return &QueryError{Err: fmt.Errorf("%w (ANY($1) is PostgreSQL's form: on SQLite $1 is a JSON array of the due keys, "+
			"write WHERE id IN (SELECT value FROM json_each($1)))", qe.Err)}
	}
	return err
}

func noKeysError(n int) error {
	return queryErrorf("run with no keys ($1 empty), the query returned %d row(s): it must return only rows whose key is in $1 "+
		"(PostgreSQL: WHERE id = ANY($1); SQLite: WHERE id IN (SELECT value FROM json_each($1)))", n)
}
