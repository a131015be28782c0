package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// copyPageSizeDefault is how many jobs or history records `copy` reads and
// writes at a time.
const copyPageSizeDefault = 1000

// copyOpts are the flags of `prescient copy`.
type copyOpts struct {
	to       string
	toSchema string
	pageSize int
	json     bool
	// leaveDeliveries is accepted and ignored: copy moves the events and
	// their deliveries now, pending ones included.
	leaveDeliveries bool
}

// Validate checks that a target is named, its schema is one
// database.schema can name, and the page size is sane.
func (o *copyOpts) Validate() error {
	if o.to == "" {
		return errors.New("--to is required: the URL of the PostgreSQL database to copy into (e.g. postgres://app@db:5432/app)")
	}
	if o.toSchema != "" && !schemaRE(o.toSchema) {
		return fmt.Errorf("--to-schema %q is not a plain identifier (want lower-case letters, digits and '_', starting with a letter or '_'): "+
			"database.schema, which the copy is read through afterwards, takes no other", o.toSchema)
	}
	if o.pageSize < 1 || o.pageSize > 100_000 {
		return fmt.Errorf("--page-size %d must be between 1 and 100000", o.pageSize)
	}
	return nil
}

func (e *env) copyCommand() *cobra.Command {
	o := &copyOpts{}
	cmd := &cobra.Command{
		Use:   "copy --to URL",
		Short: "Copy everything from the configured store (the SQLite file) into PostgreSQL",
		Long: `copy moves prescient from the store the configuration names (normally the
embedded SQLite file at database.path) to the PostgreSQL database at --to, for
when one host is no longer enough. It migrates the target (in --to-schema, if
given), then copies:

  - the slot grid and the check catalog (what resolve reads);
  - every pending job with its full state: first, next and last check, check
    and failure counts, last error, runtime, lateness, payload, created and
    updated times, and its id;
  - every history record, ids included;
  - every event in the outbox, with its deliveries in their state: the
    events keep each stage from being raised a second time, and the
    deliveries still pending are sent by the target's servers.

Jobs, history and events are written in pages inside one transaction on the
target: either all of them arrive or none do, and a failed copy can simply be
run again. The target's id sequences are moved past the copied ids.

copy refuses a target that already holds pending jobs, history or events (it
never merges two stores) and a target that is the source itself. The source
is left as it is (an older SQLite file only has its schema brought up to
date), so nothing is lost if you stay on it.

Stop every prescient server (and anything else that schedules, cancels or
resolves) before copying: a server left running keeps firing jobs on the
source, and whatever it changes after the copy began is not copied. copy
refuses a source with a server whose heartbeat is more recent than
ownership.server_timeout.

Afterwards:

  1. point database.url at the PostgreSQL database (and database.schema at
     --to-schema), or set PRESCIENT_DATABASE_URL;
  2. start the servers: they now share the PostgreSQL database, and the SQL
     functions prescient_schedule, prescient_cancel and prescient_resolve are
     there for other languages.

Keep the SQLite file until you are satisfied; prescient no longer reads it.

When stderr is a terminal, a progress line there counts the jobs, history
records and events copied so far. --json prints what was copied as one JSON document.`,
		Example: `  prescient copy --to postgres://app@db:5432/app
  prescient copy --config prescient.yaml --to postgres://app@db:5432/app --to-schema prescient`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			if o.leaveDeliveries {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: --leave-deliveries is ignored: copy moves events and their deliveries, "+
					"pending ones included, and the target's servers send them")
			}
			return runCopy(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg, o)
		},
	}
	cmd.Flags().StringVar(&o.to, "to", "", "PostgreSQL `URL` to copy into (required)")
	cmd.Flags().StringVar(&o.toSchema, "to-schema", "", "PostgreSQL `SCHEMA` to copy into (default: the connection's search_path, usually public)")
	cmd.Flags().IntVar(&o.pageSize, "page-size", copyPageSizeDefault, "copy `N` jobs or history records at a time")
	cmd.Flags().BoolVar(&o.json, "json", false, "print what was copied as JSON for scripts")
	cmd.Flags().BoolVar(&o.leaveDeliveries, "leave-deliveries", false, "ignored: pending deliveries are copied")
	_ = cmd.Flags().MarkHidden("leave-deliveries")
	return cmd
}

// copyResult says what a copy wrote to the target.
type copyResult struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Jobs    int    `json:"jobs"`
	History int    `json:"history"`
	Catalog int    `json:"catalog"`
	Events  int    `json:"events"`
	// Attempts counts the attempts left behind by the source's servers
	// (see retry.max_unfinished).
	Attempts int `json:"attempts"`
	// PendingDeliveries counts the copied deliveries still to be sent.
	PendingDeliveries int `json:"pending_deliveries"`
	// Grid is the grid recorded in the target: the source's, or the
	// configured one when the source had none.
	Grid         slots.Grid `json:"-"`
	GridFromConf bool       `json:"grid_from_config"`
	// toSchema is --to-schema, for the advice that follows.
	toSchema string
	// fromSQLite says the source is a SQLite file: declared checks'
	// queries need rewriting for PostgreSQL.
	fromSQLite bool
}

// runCopy opens both stores, refusing a missing SQLite file or a target that
// is the source, copies, and reports.
func runCopy(ctx context.Context, out, errOut io.Writer, cfg *Config, o *copyOpts) error {
	if _, fromEnv := cfg.env["database.url"]; fromEnv && cfg.Line("database.path") > 0 {
		// The variable wins over the file's database.path: say so before
		// copying another database than the one the file names.
		fmt.Fprintf(errOut, "note: the source is the PostgreSQL database %s names (%s), not the SQLite file at database.path (%s, %s:%d): unset %s to copy the file\n",
			EnvDatabaseURL, describeStore(cfg), absPath(cfg.Database.Path), cfg.file, cfg.Line("database.path"), EnvDatabaseURL)
	}
	if cfg.Database.URL != "" {
		if same, err := samePostgres(cfg.Database.URL, cfg.Database.Schema, o.to, o.toSchema); err != nil {
			return err
		} else if same {
			return fmt.Errorf("copy: the target is the source (%s): give --to (and --to-schema) another database", describeStore(cfg))
		}
	}
	// Copy takes the jobs of its source: a missing SQLite file is an
	// error, where opening it would create an empty one and copy nothing,
	// and a file an older prescient wrote is migrated to be read as this
	// version's schema.
	src, err := openStore(ctx, cfg, false, true)
	if err != nil {
		return err
	}
	defer src.Close()
	if own, others := otherInstalls(ctx, src); len(others) > 0 {
		return elsewhereError(cfg, own, others) // a PostgreSQL source whose tables are in another schema
	}
	// A SQLite source is frozen while it is read: a server or an
	// application writing to it meanwhile (schedule, reschedule, cancel)
	// waits and fails, where its write was lost, or failed the copy with a
	// message about ids (found by a trial of a move to PostgreSQL). Once
	// copied, the file is marked so: a server started on it again would
	// fire the same jobs as the servers on PostgreSQL.
	var frozen *sqlite.Frozen
	if lite, ok := src.(*sqlite.Store); ok {
		if frozen, err = lite.Freeze(ctx); err != nil {
			return fmt.Errorf("copy: %w (a server or an application is writing to it: stop them first)", err)
		}
		defer frozen.Release()
	}
	if err := refuseLiveServers(ctx, src.Driver(), "source", time.Duration(cfg.Ownership.ServerTimeout), time.Now()); err != nil {
		return err
	}
	dst, err := postgres.Open(ctx, o.to, &postgres.Opts{Schema: o.toSchema})
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	defer dst.Close()
	if err := dst.Migrate(ctx); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	// A server already running on the target keeps the grid it started
	// with, and the copy would record the source's over it: its slots fire
	// none of the copied jobs, which wait for the sweep (found by a trial
	// of a move to PostgreSQL).
	if err := refuseLiveServers(ctx, dst.Driver(), "target", time.Duration(cfg.Ownership.ServerTimeout), time.Now()); err != nil {
		return err
	}
	prog := newProgress(errOut, "copy")
	res, err := copyStoreProgress(ctx, src.Driver(), dst, o.pageSize, cfg.clientConfig().Grid, prog)
	if err != nil {
		prog.clear()
		return err
	}
	prog.done("%d job(s), %d history record(s), %d event(s), %d catalog entries copied", res.Jobs, res.History, res.Events, res.Catalog)
	res.From = describeOpen(ctx, src, cfg)
	res.To, res.toSchema, res.fromSQLite = describePostgres(o.to, o.toSchema), o.toSchema, cfg.Database.URL == ""
	if frozen != nil {
		if err := frozen.MarkCopied(ctx, res.To, time.Now()); err != nil {
			fmt.Fprintf(errOut, "warning: the copy is done, but the SQLite file could not be marked as copied (%v): "+
				"make sure no server runs on it again, or it fires the same jobs as the servers on PostgreSQL\n", err)
		}
	}
	if o.json {
		return writeJSON(out, struct {
			*copyResult
			Resolution string `json:"grid_resolution"`
			Offset     string `json:"grid_offset"`
		}{res, res.Grid.Resolution.String(), res.Grid.Offset.String()})
	}
	writeCopyResult(out, res)
	return nil
}

// refuseLiveServers refuses to copy from a store a server still uses: one
// whose heartbeat is more recent than timeout (ownership.server_timeout)
// keeps firing jobs on the source, and what it changes after the copy began
// would not be copied. A stopped server has deregistered; one that crashed
// counts as gone once its heartbeat is older than timeout. On the target
// (which is "target"), a server running keeps the grid it started with
// while the copy records the source's: its slots would fire none of the
// copied jobs.
func refuseLiveServers(ctx context.Context, drv driver.Driver, which string, timeout time.Duration, now time.Time) error {
	srvs, err := drv.ServerList(ctx)
	if err != nil {
		return fmt.Errorf("copy: list the %s's servers: %w", which, err)
	}
	var live []string
	for _, s := range srvs {
		if s.Live(now, timeout) {
			live = append(live, fmt.Sprintf("%s (heartbeat %s ago)", s.Name, max(now.Sub(s.HeartbeatAt), 0).Round(time.Second)))
		}
	}
	if len(live) == 0 {
		return nil
	}
	if which == "target" {
		return fmt.Errorf("copy: the target is in use by %s: stop its servers, and start them after the copy, "+
			"or they keep the slot grid they started with while the copy records the source's, and fire none of the copied jobs "+
			"(a server that crashed counts as gone after its last heartbeat by its own ownership.server_timeout, or %s)",
			strings.Join(live, ", "), timeout)
	}
	return fmt.Errorf("copy: the source is in use by %s: stop every prescient server before copying, "+
		"or what they change after the copy began is lost (a server that crashed counts as gone after its last heartbeat by its own ownership.server_timeout, or %s)",
		strings.Join(live, ", "), timeout)
}

// samePostgres reports whether two PostgreSQL URLs and schemas name the same
// tables: same host, port and database, and the same schema, an empty one
// counting as public. Two spellings of one host (localhost, 127.0.0.1) are
// not recognised; copy then still refuses, because the target is not empty.
func samePostgres(srcURL, srcSchema, dstURL, dstSchema string) (bool, error) {
	a, err := pgconn.ParseConfig(srcURL)
	if err != nil {
		return false, fmt.Errorf("database.url: %w", err)
	}
	b, err := pgconn.ParseConfig(dstURL)
	if err != nil {
		return false, fmt.Errorf("--to: %w", err)
	}
	schema := func(s string) string {
		if s == "" {
			return "public"
		}
		return s
	}
	return a.Host == b.Host && a.Port == b.Port && a.Database == b.Database && schema(srcSchema) == schema(dstSchema), nil
}

// copyStore copies src into dst, which must hold no pending job and no
// history: first the grid (src's, or grid when src has none) and the
// catalog, which are upserts and harmless to repeat; then every pending job
// and history record, a page at a time, in one transaction on dst.
func copyStore(ctx context.Context, src driver.Driver, dst *postgres.Store, pageSize int, grid slots.Grid) (*copyResult, error) {
	return copyStoreProgress(ctx, src, dst, pageSize, grid, nil)
}

// copyStoreProgress is copyStore, counting the jobs and records copied on
// prog (which may be nil).
func copyStoreProgress(ctx context.Context, src driver.Driver, dst *postgres.Store, pageSize int, grid slots.Grid, prog *progress) (*copyResult, error) {
	prog.set("checking the target is empty")
	if err := refuseNonEmpty(ctx, dst); err != nil {
		return nil, err
	}
	res := &copyResult{}
	g, err := src.GridGet(ctx)
	switch {
	case errors.Is(err, prescient.ErrNotFound):
		g, res.GridFromConf = grid, true
	case err != nil:
		return nil, fmt.Errorf("copy: read the source: %w", err)
	}
	if err := dst.GridSave(ctx, g); err != nil {
		return nil, fmt.Errorf("copy: write the target: %w", err)
	}
	res.Grid = g
	cat, err := src.CatalogList(ctx)
	if err != nil {
		return nil, fmt.Errorf("copy: read the source: %w", err)
	}
	if err := dst.CatalogSave(ctx, cat); err != nil {
		return nil, fmt.Errorf("copy: write the target: %w", err)
	}
	res.Catalog = len(cat)

	tx, err := dst.Pool().Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("copy: begin on the target: %w", err)
	}
	// A no-op after Commit.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for after := int64(0); ; {
		jobs, err := src.JobsExport(ctx, after, pageSize)
		if err != nil {
			return nil, fmt.Errorf("copy: read the source: %w", err)
		}
		if err := dst.JobsImport(ctx, tx, jobs); err != nil {
			return nil, fmt.Errorf("copy: write the target (nothing was committed): %w", err)
		}
		res.Jobs += len(jobs)
		prog.set("%d job(s) copied", res.Jobs)
		if len(jobs) < pageSize {
			break
		}
		after = jobs[len(jobs)-1].ID
	}
	for after := int64(0); ; {
		recs, err := src.HistoryExport(ctx, after, pageSize)
		if err != nil {
			return nil, fmt.Errorf("copy: read the source: %w", err)
		}
		if err := dst.HistoryImport(ctx, tx, recs); err != nil {
			return nil, fmt.Errorf("copy: write the target (nothing was committed): %w", err)
		}
		res.History += len(recs)
		prog.set("%d job(s), %d history record(s) copied", res.Jobs, res.History)
		if len(recs) < pageSize {
			break
		}
		after = recs[len(recs)-1].ID
	}
	for after := int64(0); ; {
		events, err := src.OutboxExport(ctx, after, pageSize)
		if err != nil {
			return nil, fmt.Errorf("copy: read the source: %w", err)
		}
		if err := dst.OutboxImport(ctx, tx, events); err != nil {
			return nil, fmt.Errorf("copy: write the target (nothing was committed): %w", err)
		}
		res.Events += len(events)
		for _, en := range events {
			for _, d := range en.Deliveries {
				if d.State == driver.DeliveryPending {
					res.PendingDeliveries++
				}
			}
		}
		prog.set("%d job(s), %d history record(s), %d event(s) copied", res.Jobs, res.History, res.Events)
		if len(events) < pageSize {
			break
		}
		after = events[len(events)-1].Event.ID
	}
	// The attempts left behind (checks that started and never finished,
	// their servers gone) go too: their jobs' allowance of crashes
	// (retry.max_unfinished) does not start again on the target.
	attempts, err := src.AttemptsLeft(ctx)
	if err != nil {
		return nil, fmt.Errorf("copy: read the source: %w", err)
	}
	if err := dst.AttemptsImport(ctx, tx, attempts); err != nil {
		return nil, fmt.Errorf("copy: write the target (nothing was committed): %w", err)
	}
	res.Attempts = len(attempts)
	prog.set("%d job(s), %d history record(s), %d event(s) copied; committing", res.Jobs, res.History, res.Events)
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("copy: commit on the target (nothing was committed): %w", err)
	}
	return res, nil
}

// refuseNonEmpty fails unless dst holds no pending job, no history record
// and no event.
func refuseNonEmpty(ctx context.Context, dst driver.Driver) error {
	jobs, err := dst.JobsExport(ctx, 0, 1)
	if err != nil {
		return fmt.Errorf("copy: read the target: %w", err)
	}
	recs, err := dst.HistoryExport(ctx, 0, 1)
	if err != nil {
		return fmt.Errorf("copy: read the target: %w", err)
	}
	events, err := dst.OutboxExport(ctx, 0, 1)
	if err != nil {
		return fmt.Errorf("copy: read the target: %w", err)
	}
	if len(jobs) > 0 || len(recs) > 0 || len(events) > 0 {
		return errors.New("copy: the target already holds pending jobs, history or events; copy only fills an empty prescient database: " +
			"if it is an earlier copy of this source, you are done (copying it again elsewhere would make two sets of the same jobs, " +
			"each fired by its own servers); otherwise use a new database or --to-schema, or drop prescient's tables from the target first")
	}
	return nil
}

// writeCopyResult prints what was copied, and what to do next.
func writeCopyResult(out io.Writer, r *copyResult) {
	fmt.Fprintf(out, "copied %s to %s:\n", r.From, r.To)
	fmt.Fprintf(out, "  pending jobs     %d\n", r.Jobs)
	fmt.Fprintf(out, "  history records  %d\n", r.History)
	fmt.Fprintf(out, "  events           %d (%d deliveries still to send, by the target's servers)\n", r.Events, r.PendingDeliveries)
	fmt.Fprintf(out, "  catalog entries  %d\n", r.Catalog)
	if r.Attempts > 0 {
		fmt.Fprintf(out, "  attempts left    %d (checks that started and never finished: they count against their jobs' retry.max_unfinished)\n", r.Attempts)
	}
	grid := "every " + r.Grid.Resolution.String()
	if r.Grid.Offset != 0 {
		grid += " offset " + r.Grid.Offset.String()
	}
	if r.GridFromConf {
		grid += " (from the configuration: the source had none recorded)"
	}
	fmt.Fprintf(out, "  slot grid        %s\n", grid)
	next := "next: point database.url at the target (or set " + EnvDatabaseURL + ")"
	if r.toSchema != "" {
		next += " and database.schema at " + r.toSchema
	}
	if r.fromSQLite {
		next += "; rewrite the queries of declared checks for PostgreSQL (= ANY($1), not json_each($1))"
	}
	fmt.Fprintln(out, next+"; then start the servers")
}
