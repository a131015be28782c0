package cli

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlcheck"
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
		Short: "Watch unshipped orders raise alerts and escalations, delivered to a webhook, in about 10 seconds",
		Long: `demo runs the order example against a throwaway database and narrates it, on
a 2-second slot grid, with orders alerting after 4s and escalating after 8s.

Three orders are watched by the Go check order_unshipped and two by
order_unshipped_sql, the same check declared in SQL (the demo prints its
YAML). One order of each kind ships, one is cancelled, and one of each stays
unshipped: it raises an alert, then an escalation. Both checks deliver
their events to a webhook receiver the demo runs on loopback, which checks
each request's signature and answers the first one 503, as a receiver
being deployed would: prescient sends it again. The demo then prints the
history, the Go check's alerts table and the events with their deliveries,
removes its database and exits.

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
			ctx, stop := untilSignal(cmd.Context())
			defer stop()
			return interrupted(ctx, "demo", runDemo(ctx, cmd.OutOrStdout(), cfg.Database.URL, o))
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
	return openScratchDB(ctx, dbURL, "demo", prescient.WorkersDefault)
}

// openScratchDB is openDemoDB for the command named cmd ("demo", "bench"),
// which names the SQLite file or PostgreSQL schema and prefixes the errors,
// and whose client runs workers groups at once (the PostgreSQL pool is sized
// for them).
func openScratchDB(ctx context.Context, dbURL, cmd string, workers int) (*demoDB, error) {
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
	st, err := postgres.Open(openCtx, dbURL, &postgres.Opts{Schema: schema, Workers: workers})
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

// demoSink is the name of the demo's webhook sink.
const demoSink = "receiver"

// demoChecksYAML is the check the demo declares in SQL, as a configuration
// file declares it: the declarative twin of order_unshipped at demo speed,
// with the condition on the due keys (the first %s) in the store's dialect,
// delivering its events to the webhook at the URL (the second %s).
const demoChecksYAML = `checks:
  order_unshipped_sql:
    entity: order
    query: |
      SELECT id AS key, placed_at
      FROM orders
      WHERE %s
        AND status = 'unshipped'
    anchor: placed_at
    stages:
      - {after: 4s, event: order.unshipped, stage: alert, severity: warning}
      - {after: 8s, event: order.unshipped.escalated, stage: escalation, severity: critical}
    awaits: [shipped]
    sinks: [receiver]
sinks:
  receiver:
    type: webhook
    url: %s
    secret_env: PRESCIENT_DEMO_SECRET
`

// runDemo runs the narrated order demo in a throwaway database (see
// openDemoDB) and removes it at the end unless o.keep. Orders 1001-1003 are
// watched by the Go check order_unshipped, orders 1004-1005 by a check
// declared in SQL, order_unshipped_sql; both deliver their events to a
// webhook receiver the demo runs on loopback, which answers its first
// request 503, as a receiver being deployed would, so that prescient tries
// that delivery again.
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

	rcv, err := startReceiver(n)
	if err != nil {
		return err
	}
	defer rcv.close()
	n.say("webhook receiver listening on %s (it checks each request's signature)", rcv.url)

	logger := slog.New(&narrateHandler{n: n, level: slog.LevelInfo})
	reg, err := demoRegistry(n, logger)
	if err != nil {
		return err
	}
	declared, err := demoDeclared(ctx, n, st, rcv.url)
	if err != nil {
		return err
	}
	if err := reg.RegisterBatch(declared.Spec().Name, narratedBatch(n, declared.Batch), declared.Spec().Opts()); err != nil {
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
	deliverer, err := delivery.New(st.Driver(), &delivery.Config{
		Server: "demo",
		Targets: []delivery.Target{{
			Name:        demoSink,
			Sink:        &delivery.Webhook{URL: rcv.url, Secret: rcv.secret},
			Timeout:     2 * time.Second,
			MaxAttempts: 5,
			Backoff:     delivery.Backoff{Initial: 500 * time.Millisecond, Max: time.Second},
		}},
		// The deliverer speaks up only when something is wrong: here the
		// receiver's 503, at WARN, then nothing more.
		Logger: slog.New(&narrateHandler{n: n, prefix: "delivery: ", level: slog.LevelWarn}),
		Poll:   250 * time.Millisecond,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := client.Start(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	deliverer.Start()
	defer func() {
		// Stop is idempotent: this one is for the early returns.
		if serr := client.Stop(context.WithoutCancel(ctx)); serr != nil {
			err = errors.Join(err, serr)
		}
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = deliverer.Stop(stopCtx)
	}()
	n.say("server started: slots every %s; orders alert after %s and escalate after %s unshipped",
		demoResolution, demoAlertAfter, demoEscalateAfter)

	inTx := func(fn func(tx any) error) error { return db.inTx(ctx, fn) }
	for _, id := range []string{"1001", "1002", "1003"} {
		var job *prescient.Job
		if err := inTx(func(tx any) (err error) {
			job, err = orders.Place(ctx, client, tx, id, time.Now(), demoOrderOpts(nil))
			return err
		}); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		n.say("placed order %s; its check %s is scheduled for slot %s", id, orders.Check, job.NextCheckAt.UTC().Format("15:04:05"))
	}
	for _, id := range []string{"1004", "1005"} {
		var job *prescient.Job
		if err := inTx(func(tx any) error {
			placed := time.Now()
			if err := execTx(ctx, tx, `INSERT INTO orders (id, status, placed_at) VALUES ($1, $2, $3)`, id, orders.StatusUnshipped, placed.UTC()); err != nil {
				return err
			}
			var err error
			job, err = client.ScheduleTx(ctx, tx, prescient.ScheduleParams{Entity: orders.Entity, Key: id, Check: declared.Spec().Name, At: placed.Add(demoAlertAfter)})
			return err
		}); err != nil {
			return fmt.Errorf("demo: place order %s: %w", id, err)
		}
		n.say("placed order %s; its check %s is scheduled for slot %s", id, declared.Spec().Name, job.NextCheckAt.UTC().Format("15:04:05"))
	}
	pause(ctx, time.Second)
	for _, id := range []string{"1002", "1005"} {
		if err := inTx(func(tx any) error {
			k, err := orders.Ship(ctx, client, tx, id)
			if err == nil {
				n.say("shipped order %s: resolve(order, %s, shipped) settled %d pending check(s)", id, id, k)
			}
			return err
		}); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
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
	n.say("orders 1001 and 1004 stay unshipped; waiting for their alerts, escalations and webhooks...")

	watched := map[string]string{"1001": orders.Check, "1004": declared.Spec().Name}
	deadline := time.Now().Add(demoTimeout)
	for {
		pending := 0
		for id, check := range watched {
			_, jerr := client.Job(ctx, orders.Entity, id, check)
			switch {
			case errors.Is(jerr, prescient.ErrNotFound):
			case jerr != nil:
				return fmt.Errorf("demo: watch order %s: %w", id, jerr)
			default:
				pending++
			}
		}
		if pending == 0 && rcv.received() == demoEvents {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo: after %s, %d check(s) still pending and %d of %d event(s) received; is the server firing slots? (see the log above)",
				demoTimeout, pending, rcv.received(), demoEvents)
		}
		if !pause(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
	n.say("both checks are done and the receiver has every event: nothing is pending any more")
	if err := client.Stop(ctx); err != nil {
		return fmt.Errorf("demo: %w", err)
	}

	recs, err := client.History(ctx, history.Filter{Entity: orders.Entity})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintln(out, "\nhistory:")
	writeHistoryTable(out, recs)
	fmt.Fprintln(out, "\nalerts (written by order_unshipped):")
	if err := writeAlerts(ctx, out, db); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nevents and their deliveries to the webhook:")
	ds, err := client.Deliveries(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	writeDemoDeliveries(out, ds)
	fmt.Fprintln(out)
	return nil
}

// demoEvents is how many events the demo's receiver gets: an alert and an
// escalation for order 1001 (Go) and for order 1004 (declared).
const demoEvents = 4

// demoDeclared declares the demo's SQL check from YAML, in the store's
// dialect, prints the declaration and prepares its query.
func demoDeclared(ctx context.Context, n *narrator, st prescient.Store, url string) (*sqlcheck.Check, error) {
	due := "id IN (SELECT value FROM json_each($1))"
	if _, ok := st.(*postgres.Store); ok {
		due = "id = ANY($1)"
	}
	yaml := fmt.Sprintf(demoChecksYAML, due, url)
	cfg, err := ParseConfig("demo.yaml", []byte(yaml))
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("demo: the declared check: %w", err)
	}
	n.say("declared a check in SQL, no Go (as in a configuration file):\n\n%s", indent(yaml, "    "))
	db, err := sqlcheck.ForStore(st)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	chk, err := sqlcheck.Prepare(ctx, db, cfg.DeclaredChecks()[0])
	if err != nil {
		return nil, fmt.Errorf("demo: the declared check: %w", err)
	}
	n.say("prepared its query: it returns %s", columnNames(chk.Columns()))
	return chk, nil
}

func columnNames(cols []sqlcheck.Column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

// execTx runs a statement in the demo's application transaction, a pgx.Tx
// or a *sql.Tx.
func execTx(ctx context.Context, tx any, q string, args ...any) error {
	switch tx := tx.(type) {
	case pgx.Tx:
		_, err := tx.Exec(ctx, q, args...)
		return err
	case *sql.Tx:
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	}
	return fmt.Errorf("demo: a transaction of type %T", tx)
}

// receiver is the demo's webhook receiver on loopback: it checks each
// request's signature, answers the very first 503 (a receiver being
// deployed), and keeps the idempotency keys it accepted, counting each once
// as a receiver should.
type receiver struct {
	url    string
	secret []byte
	srv    *http.Server
	n      *narrator

	mu       sync.Mutex
	requests int
	keys     map[string]bool
}

// receiverPath is the path the receiver takes events on.
const receiverPath = "/prescient/events"

func startReceiver(n *narrator) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: start the webhook receiver: %w", err)
	}
	r := &receiver{url: "http://" + ln.Addr().String() + receiverPath, secret: []byte(rand.Text()), n: n, keys: make(map[string]bool)}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go r.srv.Serve(ln)
	return r, nil
}

func (r *receiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

func (r *receiver) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keys)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != receiverPath {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	if err := delivery.Verify(r.secret, req.Header.Get("Prescient-Signature"), body, time.Now(), 5*time.Minute); err != nil {
		r.n.say("receiver: refused a request with a bad signature: %v", err)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var ev struct {
		Event, Stage, Severity, Key, Check string
		IdempotencyKey                     string `json:"idempotency_key"`
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, "not an event", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	first, seen := r.requests == 1, r.keys[ev.IdempotencyKey]
	if !first {
		r.keys[ev.IdempotencyKey] = true
	}
	r.mu.Unlock()
	attempt := req.Header.Get("Prescient-Attempt")
	switch {
	case first:
		r.n.say("receiver: answered 503 to %s of order %s (attempt %s), as a receiver being deployed would: prescient will send it again",
			ev.Event, ev.Key, attempt)
		http.Error(w, "deploying", http.StatusServiceUnavailable)
		return
	case seen:
		r.n.say("receiver: %s again (attempt %s): already handled, acknowledged", ev.IdempotencyKey, attempt)
	default:
		r.n.say("receiver: got %s (%s) of order %s from check %s, attempt %s, signature ok; idempotency key %s",
			ev.Event, ev.Severity, ev.Key, ev.Check, attempt, ev.IdempotencyKey)
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeDemoDeliveries prints the events recorded and how their deliveries
// ended, oldest first.
func writeDemoDeliveries(out io.Writer, ds []*prescient.Delivery) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tCHECK\tEVENT\tSTAGE\tSEVERITY\tSINK\tSTATE\tATTEMPTS")
	for i := len(ds) - 1; i >= 0; i-- {
		d := ds[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", d.Event.Key, d.Event.Check, d.Event.Event, d.Event.Stage,
			d.Event.Severity, d.Sink, d.State, d.Attempts)
	}
	tw.Flush()
}

// narratedBatch wraps a batch check so that each call of it is narrated.
func narratedBatch(n *narrator, fn checks.BatchFunc) checks.BatchFunc {
	return func(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
		keys := make([]string, len(jobs))
		for i, j := range jobs {
			keys[i] = j.Key
		}
		j := jobs[0]
		n.say("slot %s fired: declared check %s, one query for %d job(s): %s %s (%s late)", j.Slot.Format("15:04:05"), j.Check,
			len(jobs), j.Entity, strings.Join(keys, ", "), j.Lateness().Round(time.Millisecond))
		res, err := fn(ctx, jobs)
		if err != nil {
			n.say("check %s failed: %v", j.Check, err)
			return res, err
		}
		for i, r := range res {
			j := jobs[i]
			switch {
			case r.Err != nil:
				n.say("check %s of %s %s failed: %v", j.Check, j.Entity, j.Key, r.Err)
			case r.Next.IsZero():
				n.say("check %s of %s %s is done", j.Check, j.Entity, j.Key)
			default:
				n.say("check %s of %s %s asks to run again at %s", j.Check, j.Entity, j.Key, r.Next.UTC().Format("15:04:05"))
			}
		}
		return res, nil
	}
}

// demoOrderOpts are the example's options at demo speed.
func demoOrderOpts(logger *slog.Logger) orders.Options {
	return orders.Options{AlertAfter: demoAlertAfter, EscalateAfter: demoEscalateAfter, Logger: logger, Sinks: []string{demoSink}}
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
