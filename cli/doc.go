// Package cli is the `prescient` command line as a library: the cobra
// command tree (migrate, run, schedule, cancel, resolve, sweep, status,
// history, slots, demo) and the YAML configuration file it reads.
//
// The stock binary, cmd/prescient, knows only the example check. To run your
// own Go checks, build your own binary around the same commands:
//
//	func main() {
//		reg := &checks.Registry{}
//		_ = reg.Register("payout_unconfirmed", checkPayout, &checks.Opts{Awaits: []string{"confirmed"}})
//		root := cli.NewRootCommand(&cli.Opts{Checks: reg, Out: os.Stdout, Err: os.Stderr})
//		if err := root.ExecuteContext(context.Background()); err != nil {
//			os.Exit(1)
//		}
//	}
//
// Configuration: DefaultConfig holds every key's default; LoadConfig reads a
// file strictly (unknown keys and bad values are *ConfigError values naming
// the key path and line) and applies the PRESCIENT_DATABASE_URL and
// PRESCIENT_SERVER overrides; Config.Validate checks it as the engine would;
// Config.ClientConfig turns it into a prescient.Config.
package cli
