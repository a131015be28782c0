package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
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
JSON with log.format: json.

With http.listen set it serves GET /healthz (200 while the process runs) and
GET /readyz (200 when its last use of the database succeeded; 503 "database
unreachable" while the database is away, with the error in the log: the
server keeps running, retries, and catches up the slots it missed once the
database is back).

The stock binary knows only the example check order_unshipped; build your own
binary with cli.NewRootCommand to run your own Go checks. Jobs of checks a
server does not know stay pending, and are reported.`,
		Example: `  PRESCIENT_DATABASE_URL=postgres://app@localhost:5432/app prescient run
  PRESCIENT_SERVER=web-2 prescient run --config /etc/prescient.yaml --migrate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sigs)
			go func() {
				sig := <-sigs
				fmt.Fprintf(e.opts.Err, "received %s: stopping (a second signal exits at once)\n", sig)
				cancel()
				sig = <-sigs
				fmt.Fprintf(e.opts.Err, "received %s again: exiting at once\n", sig)
				os.Exit(130)
			}()
			return e.run(ctx, o)
		},
	}
	cmd.Flags().BoolVar(&o.migrate, "migrate", false, "run the migrations before starting")
	return cmd
}

// run serves until ctx ends, then stops the client and returns nil.
func (e *env) run(ctx context.Context, o *runOpts) error {
	cfg, err := e.config()
	if err != nil {
		return err
	}
	log := e.logger(cfg)
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if o.migrate {
		if err := st.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		log.Info("migrated", "store", describeStore(cfg))
	}
	pc := e.clientConfig(cfg, log)
	client, err := prescient.NewClient(st, &pc)
	if err != nil {
		return err
	}
	if cfg.HTTP.Listen != "" {
		stopHTTP, err := serveHealth(cfg.HTTP.Listen, client, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	pc = client.Config()
	if err := client.Start(ctx); err != nil {
		return err
	}
	names := make([]string, 0)
	for _, c := range pc.Checks.All() {
		names = append(names, c.Name)
	}
	log.Info("serving", "server", pc.Server, "store", describeStore(cfg), "checks", names, "grid", pc.Grid.String())

	<-ctx.Done()
	log.Info("stopping", "grace", pc.ShutdownGrace)
	stopCtx := context.WithoutCancel(ctx)
	if err := client.Stop(stopCtx); err != nil {
		return err
	}
	return nil
}
