package cli

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
)

// Opts configure the command tree NewRootCommand builds.
type Opts struct {
	// Checks holds the Go checks a server built from this command tree runs
	// (`run`, `sweep --mode run`) and whose awaited events `resolve` knows.
	// Nil means an empty registry: the binary can still schedule, cancel,
	// resolve and report.
	Checks *checks.Registry
	// Out receives command output. Nil means os.Stdout.
	Out io.Writer
	// Err receives logs and error messages. Nil means os.Stderr.
	Err io.Writer
	// Now is the clock of the engine the commands build. Nil means
	// time.Now. Simulations and fault tests set it (a skewed clock, say).
	Now func() time.Time

	// lookupEnv reads the environment (tests replace it). Nil means
	// os.LookupEnv.
	lookupEnv func(string) (string, bool)
}

func (o *Opts) withDefaults() *Opts {
	var c Opts
	if o != nil {
		c = *o
	}
	if c.Checks == nil {
		c.Checks = &checks.Registry{}
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Err == nil {
		c.Err = os.Stderr
	}
	if c.lookupEnv == nil {
		c.lookupEnv = os.LookupEnv
	}
	return &c
}

// env is what every subcommand shares: the options and the global flags.
type env struct {
	opts       *Opts
	configPath string
	// observer, when set (by run, for its metrics), is the Observer of the
	// clients the commands build.
	observer prescient.Observer
	// declared is what declare (declared.go) added to opts.Checks: the
	// checks of the configuration's checks section.
	declared *declared
	// progress, when set (by a command that draws one), is the progress
	// line on opts.Err: the log records go around it.
	progress *progress
	// deliveryGate, when set (by run), holds the delivery workers back
	// until it is closed: once the server is built, its store migrated.
	deliveryGate <-chan struct{}
}

// flagError adds to an unknown one-dash flag (-5) how to pass an argument
// that begins with '-', most likely what it is: prescient has no one-letter
// flags but -h, and a key may be "-5" (found by a trial of bad input).
func flagError(cmd *cobra.Command, err error) error {
	_, args, _ := strings.Cut(cmd.Use, " ")
	if !strings.HasPrefix(err.Error(), "unknown shorthand flag") || args == "" {
		return err
	}
	args, _, _ = strings.Cut(args, " (") // "ENTITY KEY CHECK (--at TIME | --in DURATION)"
	return fmt.Errorf("%w: an argument that begins with '-' (a key such as -5) goes after \"--\", every flag before it: %s [flags] -- %s",
		err, cmd.CommandPath(), args)
}

// NewRootCommand returns the `prescient` command with every subcommand. It
// does not read the environment or any file until a command runs. Run it
// with ExecuteContext: a failing command prints "Error: ..." to opts.Err and
// returns the error, so that main can exit non-zero. opts may be nil.
func NewRootCommand(opts *Opts) *cobra.Command {
	e := &env{opts: opts.withDefaults()}
	root := &cobra.Command{
		Use:   "prescient",
		Short: "Schedule checks for things that should have happened, and act when they have not",
		Long: `prescient schedules a check for an entity when something happens (an order is
placed) and runs it when the time comes (is it shipped yet?). Work is
proportional to what is due, never to the size of the tables.

Configuration comes from --config FILE (YAML, see config.example.yaml), on top
of built-in defaults. The environment variables PRESCIENT_DATABASE_URL and
PRESCIENT_SERVER override database.url and server.`,
		SilenceUsage: true,
	}
	root.SetOut(e.opts.Out)
	root.SetErr(e.opts.Err)
	root.SetFlagErrorFunc(flagError)
	root.PersistentFlags().StringVar(&e.configPath, "config", "", "YAML configuration `FILE` (default: none, built-in defaults)")
	root.AddCommand(
		e.migrateCommand(),
		e.runCommand(),
		e.scheduleCommand(),
		e.cancelCommand(),
		e.resolveCommand(),
		e.sweepCommand(),
		e.statusCommand(),
		e.historyCommand(),
		e.deliveriesCommand(),
		e.slotsCommand(),
		e.checksCommand(),
		e.demoCommand(),
		e.copyCommand(),
		e.benchCommand(),
		e.jobsCommand(),
		e.rescheduleCommand(),
		e.retryCommand(),
		e.versionCommand(),
	)
	setVersion(root)
	return root
}

// emptyFilter returns an error naming the first of the filter flags named
// that was given an empty value (`--check "$CHECK"` with CHECK unset), which
// would otherwise be read as no filter and widen to everything.
func emptyFilter(cmd *cobra.Command, names ...string) error {
	for _, n := range names {
		// A list flag given "" is an empty list, printed [].
		if f := cmd.Flags().Lookup(n); f != nil && f.Changed && (f.Value.String() == "" || f.Value.String() == "[]") {
			return fmt.Errorf("--%s is empty: name the %s, or leave --%s out", n, n, n)
		}
	}
	return nil
}

// positionalArgs accepts the arguments named by names, those in brackets
// ("[CHECK]") optional and last. Otherwise it says what the command expects
// and what is missing or extra: "resolve: expected ENTITY KEY EVENT, got 2
// arguments (missing EVENT)", where cobra.ExactArgs would only count them.
func positionalArgs(names ...string) cobra.PositionalArgs {
	required := 0
	for _, n := range names {
		if !strings.HasPrefix(n, "[") {
			required++
		}
	}
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= required && len(args) <= len(names) {
			return nil
		}
		got := "no arguments"
		switch len(args) {
		case 0:
		case 1:
			got = "1 argument"
		default:
			got = fmt.Sprintf("%d arguments", len(args))
		}
		if len(args) < required {
			return fmt.Errorf("%s: expected %s, got %s (missing %s)", cmd.Name(), strings.Join(names, " "), got, strings.Join(names[len(args):required], " "))
		}
		extra := make([]string, 0, len(args)-len(names))
		for _, a := range args[len(names):] {
			extra = append(extra, strconv.Quote(a))
		}
		return fmt.Errorf("%s: expected %s, got %s (%d too many: %s; quote an argument that holds spaces)",
			cmd.Name(), strings.Join(names, " "), got, len(extra), strings.Join(extra, " "))
	}
}

// config loads and validates the configuration named by --config.
func (e *env) config() (*Config, error) {
	cfg, err := loadConfig(e.configPath, e.opts.lookupEnv)
	if err != nil {
		return nil, err
	}
	if e.opts.Checks != nil {
		cfg.goRuntime = e.opts.Checks.MaxRuntime()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// logger builds the logger the configuration asks for, writing to opts.Err
// one record a line: logfmt-like text, or JSON objects with log.format:
// json. Durations read the same in both, as Go duration strings ("1.5s",
// "250ms", as in the configuration file), not as slog's JSON default of
// integer nanoseconds. Every time is in UTC, the record's own too, as the
// slots and times in its attributes are (with TZ set, slog wrote the
// record's time in the local zone beside a slot in UTC).
func (e *env) logger(cfg *Config) *slog.Logger {
	level, _ := cfg.logLevel() // validated
	ho := &slog.HandlerOptions{Level: level, ReplaceAttr: utcTime}
	out := e.progress.around(e.opts.Err)
	if cfg.Log.Format == "json" {
		ho.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr { return durationText(groups, utcTime(groups, a)) }
		return slog.New(slog.NewJSONHandler(out, ho))
	}
	return slog.New(slog.NewTextHandler(out, ho))
}

// durationText writes a duration attribute as its Go duration string.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// utcTime writes a time attribute, the record's own included, in UTC.
func utcTime(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindTime {
		a.Value = slog.TimeValue(a.Value.Time().UTC())
	}
	return a
}

// clientConfig is the engine configuration of cfg, with the options' checks
// and clock.
func (e *env) clientConfig(cfg *Config, log *slog.Logger) prescient.Config {
	pc := cfg.ClientConfig(e.opts.Checks, log)
	pc.Now = e.opts.Now
	pc.Observer = e.observer
	return pc
}

// contextError is err in a command's context: "migrate: " and the error,
// without the "prescient: " an engine error begins with, so that each
// context appears once.
type contextError struct {
	context string
	err     error
}

func (e contextError) Error() string {
	return e.context + ": " + strings.TrimPrefix(e.err.Error(), "prescient: ")
}

func (e contextError) Unwrap() error { return e.err }
