package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
)

// migrateOpts are the options of `prescient migrate`. It has none of its
// own; the struct keeps every command the same shape.
type migrateOpts struct{}

// Validate accepts every migrateOpts.
func (o *migrateOpts) Validate() error { return nil }

func (e *env) migrateCommand() *cobra.Command {
	o := &migrateOpts{}
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create or update prescient's tables and record the slot grid and check catalog",
		Long: `migrate brings the database schema up to date (it is safe to run repeatedly,
and from several processes at once) and records in the database the configured
slot grid, so that the SQL function prescient_schedule rounds check times
exactly as the engine does, and the catalog of this binary's checks and the
events they await, so that prescient_resolve (and resolve from any client)
knows which checks an event settles before any server has started.

Run it again after changing slots.resolution or slots.offset, or deploying
checks that await new events. (A starting server records both too.) A
configuration that sets neither keeps the grid already recorded.`,
		Example: `  PRESCIENT_DATABASE_URL=postgres://app@localhost:5432/app prescient migrate
  prescient migrate --config /etc/prescient.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			cfg, err := e.config()
			if err != nil {
				return err
			}
			st, err := openStore(cmd.Context(), cfg, false)
			if err != nil {
				return err
			}
			defer st.Close()
			return e.migrate(cmd.Context(), cmd.OutOrStdout(), st, cfg)
		},
	}
}

// migrate runs the store's migrations and saves the grid and the catalog of
// the options' checks. A configuration that does not set the grid keeps the
// one recorded in the database (see useRecordedGrid): only a configuration
// that sets it changes it.
func (e *env) migrate(ctx context.Context, out io.Writer, st prescient.Store, cfg *Config) error {
	fmt.Fprintf(out, "database: %s\n", describeOpen(ctx, st, cfg))
	// The store's errors say "migrate", "save grid" and "save catalog".
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	recorded, err := useRecordedGrid(ctx, st.Driver(), cfg, false)
	if err != nil {
		return err
	}
	grid := cfg.clientConfig().Grid
	if err := st.Driver().GridSave(ctx, grid); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pc := e.clientConfig(cfg, e.logger(cfg))
	client, err := prescient.NewClient(st, &pc)
	if err != nil {
		return contextError{"migrate", err}
	}
	if err := client.SyncCatalog(ctx); err != nil {
		return contextError{"migrate", err}
	}
	kept := ""
	if recorded {
		kept = " (kept from the database: the configuration does not set slots.resolution or slots.offset)"
	}
	fmt.Fprintf(out, "migrated; slot grid %s%s and %d check(s) recorded\n", grid, kept, len(e.opts.Checks.All()))
	return nil
}
