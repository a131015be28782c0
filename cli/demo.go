package cli

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// Demo timing: short enough to watch, long enough to see the slots.
const (
	demoResolution    = 2 * time.Second
	demoAlertAfter    = 4 * time.Second
	demoEscalateAfter = 8 * time.Second
	// demoTimeout bounds the wait for the escalation; it should come about
	// EscalateAfter plus two slots after the orders are placed.
	demoTimeout = 40 * time.Second
)

// demoOpts are the flags of `prescient demo`.
type demoOpts struct {
	keep bool // keep the demo's database instead of removing it
}

// Validate accepts every demoOpts.
func (o *demoOpts) Validate() error { return nil }

func (e *env) demoCommand() *cobra.Command {
	o := &demoOpts{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Watch unshipped orders raise an alert, then an escalation, in about 10 seconds",
		Long: `demo runs the order example against a throwaway database and narrates it:
three orders are placed with the order_unshipped check (alert after 4s,
escalation after 8s, on a 2-second slot grid); one ships, one is cancelled,
and the third stays unshipped: it raises an alert, then an escalation. The
demo then prints the history and alerts tables, removes its database and
exits.

With no database.url (nor PRESCIENT_DATABASE_URL) it uses a fresh SQLite file
in a temporary directory: it needs nothing installed. With one, it creates
(then drops) a schema named prescient_demo_<random> in that PostgreSQL
database.`,
		Example: `  prescient demo
  PRESCIENT_DATABASE_URL=postgres://me@localhost:5432/scratch prescient demo --keep`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), cfg.Database.URL, o)
		},
	}
	cmd.Flags().BoolVar(&o.keep, "keep", false, "keep the demo's SQLite file or PostgreSQL schema instead of removing it")
	return cmd
}

// narrator prints timestamped lines, from any goroutine.
type narrator struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (n *narrator) say(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	fmt.Fprintf(n.out, "%s  +%4.1fs  %s\n", now.UTC().Format("15:04:05.000"), now.Sub(n.start).Seconds(), fmt.Sprintf(format, args...))
}

// narrateHandler is a slog.Handler that turns log records into narration.
type narrateHandler struct {
	n      *narrator
	prefix string
	attrs  []slog.Attr
	level  slog.Level
}

func (h *narrateHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *narrateHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.prefix)
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		if a.Key == "server" {
			return true
		}
		v := a.Value.Resolve()
		if t, ok := v.Any().(time.Time); ok {
			fmt.Fprintf(&b, " %s=%s", a.Key, t.UTC().Format("15:04:05"))
		} else {
			fmt.Fprintf(&b, " %s=%v", a.Key, v)
		}
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	h.n.say("%s", b.String())
	return nil
}

func (h *narrateHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *narrateHandler) WithGroup(string) slog.Handler { return h }

// demoDB is the demo's throwaway database: the store, and what the demo does
// in the database itself (its own tables, the application's transactions).
type demoDB struct {
	store prescient.Store
	// inTx runs fn in an application transaction of the store's kind.
	inTx func(ctx context.Context, fn func(tx any) error) error
	// exec runs DDL.
	exec func(ctx context.Context, sql string) error
	// query runs a query for the alerts table.
	query func(ctx context.Context, sql string) (rowScanner, error)
	// what describes the database for the narration.
	what string
	// remove removes the database (unless the demo keeps it).
	remove func(ctx context.Context) (string, error)
}

// rowScanner is the part of pgx.Rows the demo reads; sqlRows gives
// *sql.Rows the same shape.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// sqlRows adapts *sql.Rows, whose Close returns an error, to rowScanner.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { r.Rows.Close() }

// openDemoDB opens a throwaway database: a schema in PostgreSQL at dbURL, or
// a fresh SQLite file when dbURL is empty.
func openDemoDB(ctx context.Context, dbURL string) (*demoDB, error) {
	return openScratchDB(ctx, dbURL, "demo")
}

// openScratchDB is openDemoDB for the command named cmd ("demo", "bench"),
// which names the SQLite file or PostgreSQL schema and prefixes the errors.
func openScratchDB(ctx context.Context, dbURL, cmd string) (*demoDB, error) {
	openCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if dbURL == "" {
		dir, err := os.MkdirTemp("", "prescient-"+cmd+"-")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		path := filepath.Join(dir, cmd+".db")
		st, err := sqlite.Open(openCtx, path, nil)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: %w", cmd, err)
		}
		return &demoDB{
			store: st,
			inTx: func(ctx context.Context, fn func(tx any) error) error {
				tx, err := st.DB().BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := fn(tx); err != nil {
					tx.Rollback()
					return err
				}
				return tx.Commit()
			},
			exec: func(ctx context.Context, q string) error { _, err := st.DB().ExecContext(ctx, q); return err },
			query: func(ctx context.Context, q string) (rowScanner, error) {
				rows, err := st.DB().QueryContext(ctx, q)
				return sqlRows{rows}, err
			},
			what: "a fresh SQLite file " + path,
			remove: func(context.Context) (string, error) {
				st.Close()
				return "removed " + path, os.RemoveAll(dir)
			},
		}, nil
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	schema := "prescient_" + cmd + "_" + hex.EncodeToString(rnd[:])
	st, err := postgres.Open(openCtx, dbURL, &postgres.Opts{Schema: schema, MaxConns: 8})
	if err != nil {
		return nil, fmt.Errorf("%s: cannot reach PostgreSQL at %s: %w (unset %s and database.url to run the %s on SQLite)",
			cmd, redact(dbURL), err, EnvDatabaseURL, cmd)
	}
	return &demoDB{
		store: st,
		inTx: func(ctx context.Context, fn func(tx any) error) error {
			return pgx.BeginFunc(ctx, st.Pool(), func(tx pgx.Tx) error { return fn(tx) })
		},
		exec: func(ctx context.Context, q string) error { _, err := st.Pool().Exec(ctx, q); return err },
		query: func(ctx context.Context, q string) (rowScanner, error) {
			return st.Pool().Query(ctx, q)
		},
		what: fmt.Sprintf("PostgreSQL at %s, schema %s", redact(dbURL), schema),
		remove: func(ctx context.Context) (string, error) {
			defer st.Close()
			_, err := st.Pool().Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			return "dropped schema " + schema, err
		},
	}, nil
}

// runDemo runs the narrated order demo in a throwaway database (see
// openDemoDB) and removes it at the end unless o.keep.
func runDemo(ctx context.Context, out io.Writer, dbURL string, o *demoOpts) (err error) {
	n := &narrator{out: out, start: time.Now()}
	db, err := openDemoDB(ctx, dbURL)
	if err != nil {
		return err
	}
	st := db.store
	n.say("using %s", db.what)
	defer func() {
		if o.keep {
			n.say("kept %s", strings.TrimPrefix(db.what, "a fresh "))
			st.Close()
			return
		}
		what, derr := db.remove(context.WithoutCancel(ctx))
		if derr != nil {
			err = errors.Join(err, fmt.Errorf("demo: %s: %w", what, derr))
			return
		}
		n.say("%s", what)
	}()
	if err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("demo: migrate: %w", err)
	}
	if err := db.exec(ctx, orders.Schema); err != nil {
		return fmt.Errorf("demo: create the orders and alerts tables: %w", err)
	}

	logger := slog.New(&narrateHandler{n: n, level: slog.LevelInfo})
	reg, err := demoRegistry(n, logger)
	if err != nil {
		return err
	}
	cfg := prescient.Config{
		Server:        "demo",
		Grid:          slots.Grid{Resolution: demoResolution},
		Checks:        reg,
		SweepSchedule: "-",
		PruneSchedule: "-",
		ShutdownGrace: 5 * time.Second,
		Logger:        logger.With("server", "demo"),
	}
	client, err := prescient.NewClient(st, &cfg)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() {
		// Stop is idempotent: this one is for the early returns.
		if serr := client.Stop(context.WithoutCancel(ctx)); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	n.say("server started: slots every %s; orders alert after %s and escalate after %s unshipped",
		demoResolution, demoAlertAfter, demoEscalateAfter)

	inTx := func(fn func(tx any) error) error { return db.inTx(ctx, fn) }
	ids := []string{"1001", "1002", "1003"}
	for _, id := range ids {
		var job *prescient.Job
		if err := inTx(func(tx any) (err error) {
			job, err = orders.Place(ctx, client, tx, id, time.Now(), demoOrderOpts(nil))
			return err
		}); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		n.say("placed order %s; its check is scheduled for slot %s", id, job.NextCheckAt.UTC().Format("15:04:05"))
	}
	pause(ctx, time.Second)
	if err := inTx(func(tx any) error {
		k, err := orders.Ship(ctx, client, tx, "1002")
		if err == nil {
			n.say("shipped order 1002: resolve(order, 1002, shipped) settled %d pending check(s)", k)
		}
		return err
	}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := inTx(func(tx any) error {
		k, err := orders.Cancel(ctx, client, tx, "1003")
		if err == nil {
			n.say("order 1003 was cancelled: cancel(order, 1003) removed %d pending check(s)", k)
		}
		return err
	}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	n.say("order 1001 stays unshipped; waiting for its alert and escalation...")

	deadline := time.Now().Add(demoTimeout)
	for {
		_, jerr := client.Job(ctx, orders.Entity, "1001", orders.Check)
		if errors.Is(jerr, prescient.ErrNotFound) {
			break
		}
		if jerr != nil {
			return fmt.Errorf("demo: watch order 1001: %w", jerr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: order 1001's check was still pending after %s; is the server firing slots? (see the log above)", demoTimeout)
		}
		if !pause(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	n.say("order 1001's check is done: nothing is pending any more")
	if err := client.Stop(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	recs, err := client.History(ctx, history.Filter{Entity: orders.Entity})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintln(out, "\nhistory:")
	writeHistoryTable(out, recs)
	fmt.Fprintln(out, "\nalerts:")
	if err := writeAlerts(ctx, out, db); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return nil
}

// demoOrderOpts are the example's options at demo speed.
func demoOrderOpts(logger *slog.Logger) orders.Options {
	return orders.Options{AlertAfter: demoAlertAfter, EscalateAfter: demoEscalateAfter, Logger: logger}
}

// demoRegistry registers the order check, wrapped so that each run of it is
// narrated.
func demoRegistry(n *narrator, logger *slog.Logger) (*checks.Registry, error) {
	plain := &checks.Registry{}
	if err := orders.Register(plain, demoOrderOpts(logger)); err != nil {
		return nil, err
	}
	reg := &checks.Registry{}
	for _, c := range plain.All() {
		fn := c.Func
		err := reg.Register(c.Name, func(ctx context.Context, job *checks.Job) (time.Time, error) {
			n.say("slot %s fired: check %s #%d of %s %s (%s late)", job.Slot.Format("15:04:05"), job.Check,
				job.CheckCount+1, job.Entity, job.Key, job.Lateness().Round(time.Millisecond))
			next, err := fn(ctx, job)
			switch {
			case err != nil:
				n.say("check %s of %s %s failed: %v", job.Check, job.Entity, job.Key, err)
			case next.IsZero():
				n.say("check %s of %s %s is done", job.Check, job.Entity, job.Key)
			default:
				n.say("check %s of %s %s asks to run again at %s", job.Check, job.Entity, job.Key, next.UTC().Format("15:04:05"))
			}
			return next, err
		}, &c.Opts)
		if err != nil {
			return nil, err
		}
	}
	return reg, nil
}

func writeAlerts(ctx context.Context, out io.Writer, db *demoDB) error {
	rows, err := db.query(ctx, `SELECT order_id, stage, raised_at FROM alerts ORDER BY raised_at, order_id`)
	if err != nil {
		return fmt.Errorf("demo: read alerts: %w", err)
	}
	defer rows.Close()
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tSTAGE\tRAISED AT")
	for rows.Next() {
		var id, stage string
		var at time.Time
		if err := rows.Scan(&id, &stage, &at); err != nil {
			return fmt.Errorf("demo: read alerts: %w", err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", id, stage, at.Format("15:04:05.000"))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("demo: read alerts: %w", err)
	}
	return tw.Flush()
}

// pause waits d or until ctx ends, and reports whether ctx is still alive.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// redact hides a password in a database URL.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
