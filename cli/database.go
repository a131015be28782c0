package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// access says how a command uses the database.
type access struct {
	// readOnly: the command only reads. A missing SQLite file is an error:
	// opening it would create an empty database, and the command would
	// report nothing, silently, from the wrong directory.
	readOnly bool
	// existing: the command acts on jobs that must exist already (cancel,
	// resolve, reschedule, retry, sweep). A missing SQLite file is an error
	// too: opening it would create an empty database and report that there
	// was nothing to act on.
	existing bool
	// runsChecks: the command runs checks (sweep). Only then are the
	// declared checks' queries prepared: a query the database refuses (a
	// column renamed by the application's migration) must not stop cancel,
	// resolve or schedule, which an operator may need most then.
	runsChecks bool
	// rounds: the command rounds times to the slot grid, or fires slots. A
	// grid set in the configuration that differs from the one the servers
	// recorded in the database is refused: the command would round times to
	// other slots than the servers fire.
	rounds bool
	// header, if set, gets the line that starts a command's output for
	// people, saying which database it used (see forPeople).
	header io.Writer
}

// forPeople is where a command writes the header line: its output, unless
// the output is JSON for scripts.
func forPeople(cmd *cobra.Command, asJSON bool) io.Writer {
	if asJSON {
		return nil
	}
	return cmd.OutOrStdout()
}

// session is what a command that uses the database works with: a client
// that is not started, over the store the configuration names.
type session struct {
	client *prescient.Client
	cfg    *Config
	// database names the store for people, without any password:
	// "sqlite file /abs/prescient.db" or "postgres db:5432/app schema public".
	database string
	close    func()
}

// open loads the configuration, opens the store, settles the slot grid
// (useRecordedGrid) and builds a client that is not started. The caller must
// call the session's close.
func (e *env) open(ctx context.Context, a access) (*session, error) {
	cfg, err := e.config()
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, cfg, a.readOnly, a.existing)
	if err != nil {
		return nil, err
	}
	if sv, ok := st.(schemaVersioner); ok {
		current, latest, err := sv.SchemaVersion(ctx)
		switch {
		case err != nil:
		case current == 0:
			// No tables where the configuration points, but in another
			// schema: a store copied with --to-schema, and a configuration
			// that does not say so yet. ErrNotMigrated's advice, to
			// migrate, would make a second, empty set of tables.
			if own, others := otherSchemas(ctx, st); len(others) > 0 {
				st.Close()
				return nil, elsewhereError(cfg, own, others)
			}
		case current < latest:
			// The binary was upgraded and the database not yet migrated:
			// its statements would fail on tables or columns the schema
			// lacks, some after they wrote (found by an upgrade's trial:
			// schedule saved the job, then failed reading the catalog).
			st.Close()
			how := "run `prescient migrate` (the deploy step that upgrades it; a running older server keeps working)"
			if cfg.Database.URL == "" {
				how = "run `prescient migrate`, or `prescient run`, which migrates a SQLite file"
			}
			return nil, fmt.Errorf("the database's schema is at version %d and this prescient needs %d: %s", current, latest, how)
		case current > latest:
			// A schema a newer prescient migrated: this command may take
			// what the newer one refuses (a version's own checks are in its
			// migrations and its binary both), so it says so, as run does.
			fmt.Fprintf(e.opts.Err, "warning: the database's schema is at version %d, newer than this prescient knows (up to %d): "+
				"a newer version migrated it, and this command may not check what it does; upgrade prescient\n", current, latest)
		}
	}
	recorded, err := useRecordedGrid(ctx, st.Driver(), cfg, a.rounds)
	if err != nil {
		st.Close()
		return nil, err
	}
	// The checks declared in the configuration; a command that only reads
	// runs none, and does not prepare their queries.
	if err := e.declare(ctx, st, cfg, a.runsChecks); err != nil {
		st.Close()
		return nil, err
	}
	c, err := e.buildClient(st, cfg, recorded, e.logger(cfg), "cli")
	if err != nil {
		st.Close()
		return nil, err
	}
	s := &session{client: c, cfg: cfg, database: describeOpen(ctx, st, cfg), close: st.Close}
	if a.header != nil {
		fmt.Fprintf(a.header, "database: %s\n", s.database)
	}
	return s, nil
}

// otherInstalls returns, for a PostgreSQL store whose own schema holds no
// prescient tables, that schema and the schemas of its database that hold
// them (and that its role may read); nothing otherwise.
func otherInstalls(ctx context.Context, st prescient.Store) (string, []string) {
	if sv, ok := st.(schemaVersioner); !ok {
		return "", nil
	} else if current, _, err := sv.SchemaVersion(ctx); err != nil || current > 0 {
		return "", nil
	}
	return otherSchemas(ctx, st)
}

// otherSchemas is otherInstalls for a store known to hold no tables in its
// own schema.
func otherSchemas(ctx context.Context, st prescient.Store) (string, []string) {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return "", nil
	}
	own, others, err := pg.OtherInstalls(ctx)
	if err != nil {
		return "", nil
	}
	return own, others
}

// elsewhereError says that prescient's tables are not in own, the schema
// cfg names (or the connection's current one), but in others, and what to
// do in either case: a new install migrates, a copied store is pointed at.
func elsewhereError(cfg *Config, own string, others []string) error {
	where := "schema " + own
	switch {
	case own == "":
		where = "the search_path's schemas (none of them exists)"
	case cfg.Database.Schema == "":
		where += " (the first of the search_path; database.schema is not set)"
	}
	found := fmt.Sprintf("schema %s holds them", others[0])
	use := "set database.schema: " + others[0]
	if len(others) > 1 {
		found = fmt.Sprintf("schemas %s hold them", strings.Join(others, ", "))
		use = "set database.schema to the one that holds them"
	}
	return &ConfigError{File: cfg.file, Line: cfg.Line("database.schema"), Key: "database.schema", Err: fmt.Errorf(
		"the database has no prescient tables in %s, but %s: if your jobs are there (a store `prescient copy --to-schema` copied), %s; "+
			"if this is a new install of its own, run `prescient migrate`",
		where, found, use)}
}

// buildClient builds a client that is not started over st. recorded says
// cfg holds the grid recorded in the database (see useRecordedGrid), which
// an error then names; finishedBy is its Config.FinishedBy.
func (e *env) buildClient(st prescient.Store, cfg *Config, recorded bool, log *slog.Logger, finishedBy string) (*prescient.Client, error) {
	pc := e.clientConfig(cfg, log)
	pc.FinishedBy = finishedBy
	c, err := prescient.NewClient(st, &pc)
	if err != nil && recorded {
		return nil, fmt.Errorf("the slot grid the servers recorded in the database, %s, does not fit this configuration "+
			"(set slots.resolution and slots.offset as the servers do): %w", gridText(pc.Grid), err)
	}
	return c, err
}

// pathError is err about the SQLite file database.path names, at the line
// of the key when the file sets it.
func (c *Config) pathError(err error) error {
	if l := c.Line("database.path"); l > 0 {
		return &ConfigError{File: c.file, Line: l, Key: "database.path", Err: err}
	}
	return fmt.Errorf("database.path: %w", err)
}

// openStore opens the store the configuration names; it is the one place
// that decides which store backs the command line. With database.url (or
// PRESCIENT_DATABASE_URL) set it is PostgreSQL, migrated by `prescient
// migrate` (or `run --migrate`) as a deploy step. Otherwise it is the
// embedded SQLite file at database.path, which belongs to prescient alone
// and is migrated here, so that a first run needs no set-up, but for a
// command that only reads (readOnly), which changes nothing (open then
// refuses a schema behind this binary's); a command that only reads, or
// acts on jobs that exist (existing), refuses a file that does not exist
// instead.
func openStore(ctx context.Context, cfg *Config, readOnly, existing bool) (prescient.Store, error) {
	if cfg.Database.URL == "" {
		if _, err := os.Stat(cfg.Database.Path); (readOnly || existing) && errors.Is(err, fs.ErrNotExist) {
			why := "this command only reads"
			if !readOnly {
				why = "this command acts on jobs scheduled before"
			}
			return nil, missingFile(cfg, why)
		}
		// A write waits for the database's write lock, which a running
		// group of checks holds (SQLite runs checks one group at a time).
		st, err := sqlite.Open(ctx, cfg.Database.Path, &sqlite.Opts{BusyTimeout: cfg.busyTimeout()})
		if err != nil {
			return nil, cfg.pathError(err)
		}
		if readOnly {
			return st, nil
		}
		if err := st.Migrate(ctx); err != nil {
			st.Close()
			return nil, cfg.pathError(fmt.Errorf("%s: %w", cfg.Database.Path, err))
		}
		// A file `prescient copy` moved to PostgreSQL: its jobs live there,
		// and a server started on it again (a unit left enabled) fired them
		// a second time (found by a trial of a move to PostgreSQL).
		if to, at, copied, err := st.Copied(ctx); err != nil || copied {
			st.Close()
			if err == nil {
				err = fmt.Errorf("%s %w to %s at %s by prescient copy: its jobs live there now, and prescient no longer writes to this file "+
					"(start your servers on PostgreSQL: set database.url; commands that only read, such as status and history, still read the file; "+
					"to use the file again anyway, as after a copy you dropped, run: sqlite3 %s 'DELETE FROM prescient_copied')",
					cfg.Database.Path, errCopied, to, at.Format(time.RFC3339), cfg.Database.Path)
			}
			return nil, cfg.pathError(err)
		}
		return st, nil
	}
	st, err := postgres.Open(ctx, cfg.Database.URL, &postgres.Opts{Schema: cfg.Database.Schema, MaxConns: cfg.Database.MaxConns, Workers: cfg.Workers})
	if err != nil {
		if _, env := cfg.env["database.url"]; !env && cfg.Line("database.url") > 0 {
			// Where the URL is written, as for database.path.
			return nil, &ConfigError{File: cfg.file, Line: cfg.Line("database.url"), Key: "database.url", Err: err}
		}
		return nil, fmt.Errorf("%s: %w", cfg.source("database.url"), err)
	}
	return st, nil
}

// errCopied marks the refusal of a SQLite file `prescient copy` copied.
var errCopied = errors.New("was copied")

// missingFile is the error of a command that only reads, run where
// database.path names no file.
func missingFile(cfg *Config, why string) error {
	where := "set in " + cfg.file
	if cfg.Line("database.path") == 0 {
		where = "the default, in the working directory"
		if cfg.file == "" {
			where += "; no --config given"
		}
	}
	return &ConfigError{File: cfg.file, Line: cfg.Line("database.path"), Key: "database.path", Err: fmt.Errorf(
		"no SQLite file at %s (%s): %s, and does not create an empty database "+
			"(run it in the directory your servers run in, pass --config with the configuration they use, "+
			"or set database.path to their file; for PostgreSQL set database.url or %s)",
		absPath(cfg.Database.Path), where, why, EnvDatabaseURL)}
}

// absPath returns path made absolute, or path when that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// describeStore names the store the configuration names, for people and
// logs, without any password: "sqlite file /abs/prescient.db", "postgres
// db:5432/app schema jobs".
func describeStore(cfg *Config) string {
	if cfg.Database.URL == "" {
		return "sqlite file " + absPath(cfg.Database.Path)
	}
	return describePostgres(cfg.Database.URL, cfg.Database.Schema)
}

// describePostgres names a PostgreSQL database by host, port and name, and
// the schema; an empty schema is the search_path's.
func describePostgres(url, schema string) string {
	return describePostgresAt(url, schema, "")
}

// describePostgresAt is describePostgres for a store connected to the
// address at: a URL of several hosts (a primary and its standbys) names
// them all, and at, the one the connection reached.
func describePostgresAt(url, schema, at string) string {
	pc, err := pgconn.ParseConfig(url)
	if err != nil {
		return "postgres (database.url does not parse)"
	}
	hosts := []string{net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))}
	for _, f := range pc.Fallbacks {
		if h := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	var s string
	switch {
	case len(hosts) == 1:
		s = fmt.Sprintf("postgres %s/%s", hosts[0], pc.Database)
	case at != "":
		s = fmt.Sprintf("postgres %s/%s (connected to %s)", strings.Join(hosts, ","), pc.Database, at)
	default:
		s = fmt.Sprintf("postgres %s/%s", strings.Join(hosts, ","), pc.Database)
	}
	if schema == "" {
		return s + " (schema: the first of the search_path)"
	}
	return s + " schema " + schema
}

// describeOpen is describeStore for an open store: the schema of a
// PostgreSQL store without database.schema is asked of the database, and
// which of several hosts it reached, of its connection.
func describeOpen(ctx context.Context, st prescient.Store, cfg *Config) string {
	pg, ok := st.(*postgres.Store)
	if !ok {
		return describeStore(cfg)
	}
	schema, at := cfg.Database.Schema, ""
	if conn, err := pg.Pool().Acquire(ctx); err == nil {
		defer conn.Release()
		if schema == "" {
			var s *string
			if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&s); err == nil && s != nil {
				schema = *s
			}
		}
		at = conn.Conn().PgConn().Conn().RemoteAddr().String()
	}
	return describePostgresAt(cfg.Database.URL, schema, at)
}

// useRecordedGrid settles the slot grid of cfg with the one the servers
// recorded in the database (every starting server and `prescient migrate`
// record theirs). It reports whether cfg now holds the recorded grid.
//
//   - No grid recorded (a new database), or the same as cfg's: cfg's stands.
//   - cfg does not set slots.resolution nor slots.offset: the recorded grid
//     replaces the default, so that a command run without the servers'
//     configuration rounds as they do. The cycle stays if it fits the
//     recorded resolution; otherwise it is an error when set in the file,
//     and a single position when not.
//   - cfg sets them and they differ: with refuse (a command that rounds
//     times or fires slots), an error stating both grids; otherwise cfg's
//     stands (migrate and run record it: that is how the grid changes).
func useRecordedGrid(ctx context.Context, drv driver.Driver, cfg *Config, refuse bool) (bool, error) {
	rec, err := drv.GridGet(ctx)
	switch {
	case errors.Is(err, driver.ErrNotFound), errors.Is(err, driver.ErrNotMigrated):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read the slot grid the servers recorded: %w", err)
	}
	own := slots.Grid{Resolution: time.Duration(cfg.Slots.Resolution), Offset: time.Duration(cfg.Slots.Offset)}
	if rec.Resolution == own.Resolution && rec.Offset == own.Offset {
		return false, nil
	}
	if cfg.gridSet() {
		if !refuse {
			return false, nil
		}
		key, other := "slots.resolution", "slots.offset"
		if rec.Resolution == own.Resolution {
			key, other = other, key
		}
		line := cfg.Line(key)
		if line == 0 {
			line = cfg.Line(other)
		}
		return false, &ConfigError{File: cfg.file, Line: line, Key: key, Err: fmt.Errorf(
			"the configuration's grid, %s, differs from the grid the servers recorded in the database, %s: "+
				"this command would round times to other slots than the servers fire (set slots.resolution: %s "+
				"and slots.offset: %s as the servers do, or remove both keys to use the recorded grid; to change the grid, "+
				"run `prescient migrate` with the new one and restart the servers)",
			gridText(own), gridText(rec), rec.Resolution, rec.Offset)}
	}
	g := slots.Grid{Resolution: rec.Resolution, Offset: rec.Offset, Cycle: time.Duration(cfg.Slots.Cycle)}
	if g.Validate() != nil {
		if cfg.Line("slots.cycle") > 0 {
			return false, &ConfigError{File: cfg.file, Line: cfg.Line("slots.cycle"), Key: "slots.cycle", Err: fmt.Errorf(
				"%s is not a multiple of the slot resolution the servers recorded in the database, %s "+
					"(set the cycle the servers use, and slots.resolution: %s as they do)", cfg.Slots.Cycle, rec.Resolution, rec.Resolution)}
		}
		g.Cycle = 0
	}
	cfg.Slots = SlotsConfig{Resolution: Duration(g.Resolution), Offset: Duration(g.Offset), Cycle: Duration(g.Cycle)}
	return true, nil
}

// gridText names a grid's slots without its cycle: "every 15m0s", "every
// 1h0m0s offset 5m0s".
func gridText(g slots.Grid) string {
	s := "every " + g.Resolution.String()
	if g.Offset != 0 {
		s += " offset " + g.Offset.String()
	}
	return s
}
