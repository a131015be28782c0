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
		Short: "Create or update prescient's tables and record the slot grid",
		Long: `migrate brings the database schema up to date (it is safe to run repeatedly,
and from several processes at once) and records the configured slot grid in the
database, so that the SQL functions prescient_schedule, prescient_cancel and
prescient_resolve round check times exactly as the engine does.

Run it again after changing slots.resolution or slots.offset.`,
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
			st, err := openStore(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer st.Close()
			return migrate(cmd.Context(), cmd.OutOrStdout(), st, cfg)
		},
	}
}

// migrate runs the store's migrations and saves the grid.
func migrate(ctx context.Context, out io.Writer, st prescient.Store, cfg *Config) error {
	if err := st.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	grid := cfg.clientConfig().Grid
	if err := st.GridSave(ctx, grid); err != nil {
		return fmt.Errorf("migrate: save slot grid: %w", err)
	}
	fmt.Fprintf(out, "migrated %s; slot grid %s recorded\n", describeStore(cfg), grid)
	return nil
}
