package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/metrics"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// runOpts are the options of `prescient run`.
type runOpts struct {
	// migrate runs the migrations before starting.
	migrate bool
}

// Validate accepts every runOpts.
func (o *runOpts) Validate() error { return nil }

func (e *env) runCommand() *cobra.Command {
	o := &runOpts{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a server that fires the slots it owns until SIGINT or SIGTERM",
		Long: `run starts a prescient server: it records the slot grid and the check catalog,
sweeps overdue jobs (sweep.on_start), then fires every slot it owns at its
boundary, sweeps on sweep.schedule and prunes history on history.prune_schedule.

On SIGINT or SIGTERM it stops starting work, gives in-flight checks up to
shutdown_grace to finish (checks still running then are interrupted and their
jobs left due, untouched), deregisters and exits 0. A second signal exits at
once with status 130; nothing is lost either, since every check's effects
commit with its job's new state or not at all. Logs go to stderr as text, or
JSON with log.format: json (then every line run writes to stderr is a JSON
object, the signal messages and a failing run's error included). At
log.level: info it logs one line per slot that had jobs in it; at debug,
every slot fired and every sweep.

With http.listen set it serves GET /healthz (200 while the process runs),
GET /readyz (200 when its last use of the database succeeded; 503 "database
unreachable" while the database is away, with the error in the log: the
server keeps running, retries, and catches up the slots it missed once the
database is back) and GET /metrics (Prometheus metrics: checks run, slot lag,
pending, upcoming and overdue jobs, store errors, readiness; the database is
read for them in the background, at most once every 30s).

A database that cannot be reached at start-up is tried again, backing off
from 250ms to 15s between attempts and logging each failure, not ready
meanwhile (503 on /readyz), for up to database.startup_timeout (5m; -1 tries
forever); then run exits 1, saying why. A refusal that usually means the
configuration is wrong (a database or role that does not exist, a wrong
password, a connection pg_hba.conf rejects, a privilege the role lacks, a
SQLite file it cannot write) is logged at error level naming the cause,
and tried again all the same, in case it is being set up.

Without slots.resolution and slots.offset in the configuration, the server
uses the slot grid recorded in the database by the servers before it, if
any; a configuration that sets them records its grid (changing it, with a
warning, when it differs).

The stock binary knows only the example check order_unshipped; build your own
binary with cli.NewRootCommand to run your own Go checks, or declare checks in
SQL in the configuration's checks section (prescient checks lists them; their
queries are prepared at start-up, and one that the database refuses stops run
with the check's key and line). Jobs of checks a server does not know stay
pending, and are reported.`,
		Example: `  PRESCIENT_DATABASE_URL=postgres://app@localhost:5432/app prescient run
  PRESCIENT_SERVER=web-2 prescient run --config /etc/prescient.yaml --migrate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			log := e.logger(cfg)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			go func() {
				sig := <-sigs
				log.Info("received "+sig.String()+": stopping (a second signal exits at once)", "signal", sig.String())
				cancel()
				sig = <-sigs
				log.Warn("received "+sig.String()+" again: exiting at once", "signal", sig.String())
				os.Exit(130)
			}()
			err = e.run(ctx, cfg, log, o)
			if err != nil && cfg.Log.Format == "json" {
				// Every line on stderr is JSON: the error too, as a
				// record, instead of cobra's "Error: ..." line.
				log.Error("run failed", "error", err)
				cmd.SilenceErrors = true
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&o.migrate, "migrate", false, "run the migrations before starting")
	return cmd
}

// Start-up retries (see startServer).
const (
	// startupRetryFirst is the wait after the first failed attempt; it
	// doubles after each failure, up to startupRetryMax.
	startupRetryFirst = 250 * time.Millisecond
	startupRetryMax   = 15 * time.Second
	// startupConnectMax bounds one attempt to connect, so that a database
	// host that does not answer at all is tried again.
	startupConnectMax = 30 * time.Second
)

// run serves until ctx ends, then stops the client and returns nil.
func (e *env) run(ctx context.Context, cfg *Config, log *slog.Logger, o *runOpts) error {
	ready := &startupReadier{}
	m := metrics.New(&metrics.Opts{Sinks: slices.Sorted(maps.Keys(cfg.Sinks))})
	e.observer = m
	// Refused before anything is served: no API without its bearer token,
	// no sink without its secret (and nothing logged as served first).
	apiToken, err := e.apiToken(cfg)
	if err != nil {
		return err
	}
	secrets, err := e.sinkSecrets(cfg, log)
	if err != nil {
		return err
	}
	if cfg.HTTP.Listen != "" {
		stopHTTP, err := serveHTTP(cfg.HTTP.Listen, e.httpHandler(ready, metricsRegistry(m), log), log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	apiLn, err := e.listenAPI(cfg, log) // no API on an address it cannot listen on
	if err != nil {
		return err
	}
	apiStarted, apiStop := e.serveAPI(ctx, cfg, apiToken, apiLn, log) // 503 until started
	defer apiStop()
	built := make(chan struct{})
	var buildOnce sync.Once
	e.deliveryGate = built
	stopDelivery, err := e.startDelivery(ctx, cfg, secrets, log) // sinks: workers on a store of their own, stopped after the client
	if err != nil {
		return err
	}
	defer stopDelivery()
	// The client is served (readiness, the API, the metrics' database
	// gauges, the status page) from before Start: Start's heartbeat makes
	// it ready, and its start-up sweep, however long a catch-up after an
	// outage takes, runs while it is (a server catching up on a day of
	// slots answered 503 "database unreachable" throughout; found by a
	// trial of catch-up after downtime).
	publish := func(c *prescient.Client) {
		if c != nil {
			buildOnce.Do(func() { close(built) }) // the store is migrated: the delivery workers may start
		}
		ready.started(c)
		m.Watch(c)
		apiStarted(c)
	}
	client, closeStore, err := e.startServer(ctx, cfg, o, log, ready, publish)
	if err != nil || client == nil {
		return err // nil: stopped before it started
	}
	defer closeStore()
	if len(cfg.Sinks) == 0 {
		// With sinks, their workers' start warns of the others.
		now := time.Now
		if e.opts.Now != nil {
			now = e.opts.Now
		}
		warnUnconfiguredSinks(ctx, cfg, client.Store(), log, now())
	}
	defer apiStop() // before the store closes
	pc := client.Config()
	names := make([]string, 0)
	for _, c := range pc.Checks.All() {
		names = append(names, c.Name)
	}
	if ctx.Err() == nil {
		// Not after a signal that cut the start-up sweep short: it is
		// stopping, not serving (found by a trial of catch-up after downtime).
		log.Info("serving", "server", pc.Server, "database", describeOpen(ctx, client.Store(), cfg), "checks", names, "grid", pc.Grid.String())
	}

	<-ctx.Done()
	log.Info("stopping", "grace", pc.ShutdownGrace)
	stopCtx := context.WithoutCancel(ctx)
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	return nil
}

// startServer opens the store, migrates it with --migrate, and starts a
// client (which records the grid and the catalog and registers). What fails
// for want of the database is tried again, backing off from
// startupRetryFirst to startupRetryMax, until database.startup_timeout has
// passed (-1: forever); ready reports not ready meanwhile. A configuration
// the database shows to be wrong (a grid that does not fit, say) fails at
// once. It returns a nil client when ctx ends first.
func (e *env) startServer(ctx context.Context, cfg *Config, o *runOpts, log *slog.Logger, ready *startupReadier,
	publish func(*prescient.Client)) (*prescient.Client, func(), error) {
	limit := time.Duration(cfg.Database.StartupTimeout)
	began := time.Now()
	wait := startupRetryFirst
	for attempt := 1; ; attempt++ {
		client, closeStore, err := e.startOnce(ctx, cfg, o, log, publish)
		if err == nil {
			if attempt > 1 {
				log.Info("database reached: started", "attempts", attempt)
			}
			return client, closeStore, nil
		}
		if ctx.Err() != nil {
			log.Info("stopped while starting", "error", err)
			return nil, nil, nil
		}
		var perm permanentError
		if errors.As(err, &perm) {
			return nil, nil, perm.err
		}
		ready.failed(err)
		waited := time.Since(began)
		if limit >= 0 && waited >= limit {
			if refused, ok := refusedAsConfigured(err); ok {
				err = fmt.Errorf("%w (%s)", err, refused)
			}
			return nil, nil, fmt.Errorf("gave up starting after %s and %d attempt(s) (database.startup_timeout is %s; -1 retries forever): %w",
				waited.Round(time.Millisecond), attempt, limit, err)
		}
		next, left := wait, "never (database.startup_timeout: -1)"
		if limit >= 0 {
			next = min(next, (limit - waited).Round(time.Millisecond))
			left = (limit - waited).Round(time.Millisecond).String()
		}
		level, msg := slog.LevelWarn, "cannot start: database unavailable; not ready, retrying"
		switch refused, ok := refusedAsConfigured(err); {
		case ok:
			// Most often a typo or a missing grant, which waiting does not
			// cure; but a database or role an operator is creating, or a
			// connection drain, heals: said loudly, and tried again.
			level, msg = slog.LevelError, "cannot start: "+refused+"; not ready, retrying in case it is being set up (if not, fix the URL, the role or its grants)"
		case errors.Is(err, errSchemaBehind) || errors.Is(err, prescient.ErrNotMigrated):
			msg = "cannot start: the database's schema is not migrated; not ready, retrying"
		}
		log.Log(ctx, level, msg, "error", err, "attempt", attempt, "retry_in", next, "gives_up_in", left)
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			log.Info("stopped while starting")
			return nil, nil, nil
		case <-t.C:
		}
		wait = min(2*wait, startupRetryMax)
	}
}

// refusedAsConfigured reports whether err is a refusal that usually comes
// from the configuration or the database's set-up rather than an outage (a
// database or role that does not exist, a wrong password, a connection
// pg_hba.conf rejects, a missing privilege, a SQLite file this process
// cannot write), and describes it. Start-up still tries again (an operator
// may be creating the database or role, a maintenance window may have
// revoked CONNECT, an authentication server may be briefly down), but says
// so at error level with what to fix, not as "database unavailable".
func refusedAsConfigured(err error) (string, bool) {
	if errors.Is(err, sqlite.ErrNotWritable) {
		return "the SQLite file (database.path) or its directory is not writable by this process", true
	}
	if errors.Is(err, sqlite.ErrNotAFile) {
		return "database.path names no SQLite database file (a directory, or a file of another kind)", true
	}
	var code string
	var pe *pgconn.PgError
	var se *postgres.ServerError
	switch {
	case errors.As(err, &se):
		code = se.Code
	case errors.As(err, &pe):
		code = pe.Code
	}
	switch code {
	case "3D000":
		return "the database does not exist", true
	case "28000":
		return "the server refuses this role or connection (pg_hba.conf, or no such role)", true
	case "28P01":
		return "the password was refused", true
	case "42501":
		return "the role lacks a privilege prescient needs", true
	}
	return "", false
}

// permanentError is a start-up error that trying again cannot cure.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// startOnce is one attempt of startServer, on a copy of cfg (the grid it
// settles with the database's may differ from one attempt to the next).
func (e *env) startOnce(ctx context.Context, base *Config, o *runOpts, log *slog.Logger, publish func(*prescient.Client)) (*prescient.Client, func(), error) {
	cfg := *base
	if cfg.Database.URL != "" {
		if _, err := pgconn.ParseConfig(cfg.Database.URL); err != nil {
			return nil, nil, permanentError{fmt.Errorf("%s: %w", cfg.source("database.url"), err)}
		}
	}
	openCtx, cancel := context.WithTimeout(ctx, startupConnectMax)
	st, err := openStore(openCtx, &cfg, false, false)
	cancel()
	if errors.Is(err, postgres.ErrPooler) || errors.Is(err, postgres.ErrEncoding) || errors.Is(err, errCopied) {
		return nil, nil, permanentError{err} // the URL or the database must change: retrying cannot help
	}
	if err != nil {
		return nil, nil, err
	}
	if o.migrate {
		if _, others := otherInstalls(ctx, st); len(others) > 0 {
			log.Warn("another schema of this database holds prescient's tables already; --migrate makes another, empty set: "+
				"if your jobs are there (a store `prescient copy --to-schema` copied), set database.schema instead", "schemas", others)
		}
		if err := st.Migrate(ctx); err != nil { // the store's errors say "migrate"
			st.Close()
			if errors.Is(err, postgres.ErrEncoding) {
				return nil, nil, permanentError{err}
			}
			return nil, nil, err
		}
		log.Info("migrated", "database", describeOpen(ctx, st, &cfg))
	}
	if err := checkSchema(ctx, st, &cfg, log); err != nil {
		st.Close()
		return nil, nil, err
	}
	if err := e.declare(ctx, st, &cfg, true); err != nil { // declared.go
		st.Close()
		return nil, nil, startupError(err)
	}
	recorded, err := useRecordedGrid(ctx, st.Driver(), &cfg, false)
	if err != nil {
		st.Close()
		var ce *ConfigError
		if errors.As(err, &ce) {
			return nil, nil, permanentError{err}
		}
		return nil, nil, err
	}
	if recorded {
		log.Info("using the slot grid recorded in the database: the configuration does not set slots.resolution or slots.offset",
			"grid", gridText(cfg.clientConfig().Grid))
	}
	client, err := e.buildClient(st, &cfg, recorded, log, "") // "api": the HTTP API's calls
	if err != nil {
		st.Close()
		return nil, nil, permanentError{err}
	}
	publish(client)
	if err := client.Start(ctx); err != nil {
		publish(nil)
		st.Close()
		return nil, nil, err
	}
	return client, st.Close, nil
}

// errSchemaBehind is checkSchema's error for a schema the binary's
// migrations have not reached: the database is reachable, and start-up
// waits for `prescient migrate`.
var errSchemaBehind = errors.New("the database's schema is behind this prescient")

// schemaVersioner is a store that says which schema version its database
// is at and which this binary brings it to.
type schemaVersioner interface {
	SchemaVersion(ctx context.Context) (current, latest int64, err error)
}

// checkSchema compares the database's schema with this binary's migrations:
// a schema behind them (run without --migrate) is an error (tried
// again: a `prescient migrate` beside may bring it up), since checks would
// fail on tables or columns it lacks; one ahead of them (a newer prescient
// migrated it) is only warned of, so that rolling back a release does not
// stop the servers.
func checkSchema(ctx context.Context, st prescient.Store, cfg *Config, log *slog.Logger) error {
	sv, ok := st.(schemaVersioner)
	if !ok {
		return nil
	}
	current, latest, err := sv.SchemaVersion(ctx)
	switch {
	case err != nil:
		return err
	case current < latest:
		if current == 0 {
			// Not only "run migrate": the tables may be in another schema.
			if own, others := otherSchemas(ctx, st); len(others) > 0 {
				return fmt.Errorf("%w: %w", errSchemaBehind, elsewhereError(cfg, own, others))
			}
		}
		return fmt.Errorf("%w: it is at version %d and this prescient needs %d: run `prescient migrate` "+
			"(or start with `prescient run --migrate`)", errSchemaBehind, current, latest)
	case current > latest:
		log.Warn("the database's schema is newer than this prescient knows: a newer version migrated it; upgrade this server",
			"schema_version", current, "known_up_to", latest)
	}
	return nil
}

// startupReadier is what the health endpoints ask while `run` starts: not
// ready until the client has started, then the client.
type startupReadier struct {
	mu     sync.Mutex
	client *prescient.Client
	err    error
}

// Ready reports the started client's readiness, or why it has not started.
func (r *startupReadier) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.client != nil:
		return r.client.Ready()
	case r.err != nil:
		return fmt.Errorf("starting: %w", r.err)
	}
	return errStarting
}

// errStarting is the readiness of a server that has not tried its database
// yet, or whose client has not had its first heartbeat.
var errStarting = errors.New("starting")

func (r *startupReadier) started(c *prescient.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.client, r.err = c, nil
}

func (r *startupReadier) failed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}
