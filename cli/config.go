package cli

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// Environment variables that override the configuration file.
const (
	// EnvDatabaseURL overrides database.url.
	EnvDatabaseURL = "PRESCIENT_DATABASE_URL"
	// EnvServer overrides server.
	EnvServer = "PRESCIENT_SERVER"
)

// Defaults for the keys that belong to the command line rather than to the
// engine.
const (
	// LogLevelDefault is the default log.level.
	LogLevelDefault = "info"
	// LogFormatDefault is the default log.format.
	LogFormatDefault = "text"
)

// Config is the YAML configuration file of `prescient`. Every key is
// optional: DefaultConfig holds the value each key takes when it is absent,
// and config.example.yaml at the repository root documents them all.
//
// Environment variables are expanded in the file before it is read as YAML:
// ${NAME} and $NAME become the value of the variable NAME (a name is letters,
// digits and '_', not starting with a digit), and $$ becomes a literal $
// (pa$$w0rd reads pa$w0rd). A variable that is not set is an error naming it
// and its line, "prescient.yaml:3: ${DATABASE_URL} is not set", never an
// empty value (a variable set to "" expands to nothing); so is a $ that
// starts no reference. Comments may hold either. The value is inserted as
// it is, so write the reference between single quotes ('${PASSWORD}') when
// it may hold YAML syntax such as ": " or " #"; a reference that is a whole
// value must be read as its variable's value, or it is an error (see
// envRefErrors.misread).
//
// The file is one YAML document: a "---" or "..." after its first key is an
// error at that line, since the keys after it would be ignored. Decoding
// refuses what it would otherwise bend: a fraction or a quoted number for an
// integer (batch_size: 1.9), and a null (null, ~, or an empty value), which
// would silently mean the default; leave the key out for that. An empty value
// is allowed where it says something: "" for a string, no keys for a section.
//
// Validate refuses a 0 where the engine would read it as "the default"
// (workers: 0, guards.runtime: 0s, ...), a -1 where the key has no "no
// limit", a count no server can use (workers, batch_size or group_size over
// 10,000), and a duration too short to work: under 1ms for any key, under
// 100ms for ownership.heartbeat, 1s for ownership.server_timeout, 10ms for
// guards.runtime, and slots.resolution for guards.horizon. Each error names
// the key and what it accepts.
//
// No error shows database.url, or any value that looks like a URL with a
// password or holds password=: such a value reads <value not shown: ...>,
// and a $NAME in the password or query of a URL (where it is more likely a
// piece of the password than a variable) is not named.
//
// A Config is turned into the engine's prescient.Config by ClientConfig after
// Validate has accepted it.
type Config struct {
	// Server names this server (ledger, history, ownership). Empty means the
	// host name. PRESCIENT_SERVER overrides it.
	Server string `yaml:"server"`
	// Database says where the store lives.
	Database DatabaseConfig `yaml:"database"`
	// Slots is the slot grid.
	Slots SlotsConfig `yaml:"slots"`
	// Ownership says which server fires which position of the grid's cycle.
	Ownership OwnershipConfig `yaml:"ownership"`
	// Guards are the limits applied to every check.
	Guards GuardsConfig `yaml:"guards"`
	// Retry says how failed checks are retried.
	Retry RetryConfig `yaml:"retry"`
	// Workers caps the groups of checks running at once, each one
	// transaction on one database connection.
	Workers int `yaml:"workers"`
	// BatchSize is how many due jobs a batch check is handed at a time.
	BatchSize int `yaml:"batch_size"`
	// GroupSize is how many single-job checks one transaction runs, one after
	// the other, each in a savepoint of its own (at most 64 on PostgreSQL).
	GroupSize int `yaml:"group_size"`
	// GroupDuration is how long a group keeps starting checks before it
	// commits and goes on in a new transaction.
	GroupDuration Duration `yaml:"group_duration"`
	// SavepointEveryCheck runs every check in a savepoint of its own from the
	// start (see prescient.Config.SavepointEveryCheck).
	SavepointEveryCheck bool `yaml:"savepoint_every_check"`
	// Sweep configures catch-up of overdue jobs.
	Sweep SweepConfig `yaml:"sweep"`
	// History configures the retention of history records.
	History HistoryConfig `yaml:"history"`
	// ShutdownGrace is how long a stopping server waits for in-flight checks.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// Log configures the server's logs.
	Log LogConfig `yaml:"log"`
	// HTTP configures the server's health endpoints.
	HTTP HTTPConfig `yaml:"http"`
	// API configures the JSON API `run` serves (see APIConfig, in api.go).
	API APIConfig `yaml:"api"`
	// Checks declares checks in SQL, by name (see CheckConfig, in
	// declared.go).
	Checks map[string]CheckConfig `yaml:"checks"`
	// Sinks are where the events checks raise are delivered, by name (see
	// SinkConfig, in sinks.go).
	Sinks map[string]SinkConfig `yaml:"sinks"`

	file  string         // where the configuration was read from, for errors
	lines map[string]int // key path -> line in file
	// env names the environment variable that overrode a key, per key path.
	env map[string]string
	// goRuntime is the longest runtime guard a Go check of the binary sets
	// of its own (checks.Opts.Guards), which the file does not say.
	goRuntime time.Duration
}

// HTTPConfig is the `http` section.
type HTTPConfig struct {
	// Listen is the host:port `run` serves /healthz and /readyz on. Empty
	// serves nothing.
	Listen string `yaml:"listen"`
}

// DatabasePathDefault is the SQLite file used when no PostgreSQL URL is
// configured.
const DatabasePathDefault = "prescient.db"

// DatabaseConfig is the `database` section.
type DatabaseConfig struct {
	// URL is the PostgreSQL connection URL; PRESCIENT_DATABASE_URL overrides
	// it. Empty means the embedded SQLite store at Path.
	URL string `yaml:"url"`
	// Path is the SQLite file used when URL is empty, created if missing.
	// Relative paths are relative to the working directory.
	Path string `yaml:"path"`
	// Schema is the PostgreSQL schema holding prescient's tables. Empty means
	// the first schema of the connection's search_path (usually public).
	Schema string `yaml:"schema"`
	// MaxConns caps the connection pool. 0 takes pool_max_conns from the
	// URL if it sets one, and otherwise workers + postgres.PoolSpare, at
	// most postgres.PoolAutoMax (at least the driver's default).
	MaxConns int32 `yaml:"max_conns"`
	// BusyTimeout is how long an SQLite write waits for the database's write
	// lock, which a group of checks holds while it runs, before it fails with
	// "database is locked". Set in the file, it must exceed the longest
	// runtime guard (guards.runtime, or a declared check's own) +
	// group_duration (how long a group may hold the lock). Left out, it is
	// the larger of BusyTimeoutDefault and that + busyTimeoutMargin, so that
	// raising a runtime guard raises it too.
	// PostgreSQL ignores it.
	BusyTimeout Duration `yaml:"busy_timeout"`
	// StartupTimeout is how long `prescient run` keeps retrying to reach the
	// database (open, migrate, record the grid and register) at start-up,
	// not ready meanwhile, before it gives up and exits 1. -1 retries
	// forever.
	StartupTimeout Duration `yaml:"startup_timeout"`
}

// Defaults of the database keys.
const (
	// BusyTimeoutDefault is the default database.busy_timeout:
	// sqlite.BusyTimeoutDefault, twice the default runtime guard.
	BusyTimeoutDefault = Duration(sqlite.BusyTimeoutDefault)
	// StartupTimeoutDefault is the default database.startup_timeout.
	StartupTimeoutDefault = Duration(5 * time.Minute)
	// busyTimeoutMargin is what a derived database.busy_timeout leaves over
	// the longest a group of checks holds the write lock: the group's
	// decisions and commit still run after its last check.
	busyTimeoutMargin = 15 * time.Second
	// busyTimeoutMax is the longest database.busy_timeout: SQLite keeps it
	// in milliseconds in a 32-bit integer.
	busyTimeoutMax = Duration(24 * time.Hour)
)

// SlotsConfig is the `slots` section: the grid every check time is rounded to.
type SlotsConfig struct {
	// Resolution is the distance between two slots.
	Resolution Duration `yaml:"resolution"`
	// Offset shifts every boundary from the epoch grid; 0 <= Offset < Resolution.
	Offset Duration `yaml:"offset"`
	// Cycle is the ownership cycle; 0 means a single position.
	Cycle Duration `yaml:"cycle"`
}

// OwnershipConfig is the `ownership` section.
type OwnershipConfig struct {
	// Static maps a server name to the positions it fires. Empty: every
	// server fires every position (unless Auto).
	Static map[string][]int `yaml:"static"`
	// Auto spreads the positions over the live servers instead; it excludes
	// Static.
	Auto bool `yaml:"auto"`
	// Heartbeat is how often a server records that it is alive.
	Heartbeat Duration `yaml:"heartbeat"`
	// ServerTimeout is how long after its last heartbeat a server counts as gone.
	ServerTimeout Duration `yaml:"server_timeout"`
}

// GuardsConfig is the `guards` section; -1 disables max_checks and horizon.
type GuardsConfig struct {
	// MaxChecks caps the checks one job may run.
	MaxChecks int `yaml:"max_checks"`
	// Runtime caps one check's run.
	Runtime Duration `yaml:"runtime"`
	// Horizon caps how far after its slot a check may ask to run again.
	Horizon Duration `yaml:"horizon"`
}

// RetryConfig is the `retry` section.
type RetryConfig struct {
	// MaxFailures is how many failures in a row end a job as failed.
	MaxFailures int `yaml:"max_failures"`
	// MaxUnfinished is how many times a job's check may start without
	// finishing (its server died while it ran) before the job ends failed.
	MaxUnfinished int `yaml:"max_unfinished"`
	// BackoffMax caps the delay before a failed check is retried.
	BackoffMax Duration `yaml:"backoff_max"`
}

// SweepConfig is the `sweep` section.
type SweepConfig struct {
	// Mode is "run" or "reslot".
	Mode string `yaml:"mode"`
	// Schedule is a cron spec, or "-" to disable the scheduled sweep.
	Schedule string `yaml:"schedule"`
	// OnStart runs a sweep when the server starts.
	OnStart bool `yaml:"on_start"`
}

// HistoryConfig is the `history` section.
type HistoryConfig struct {
	// Retention is how long records are kept; -1 keeps them forever.
	Retention Duration `yaml:"retention"`
	// PruneSchedule is a cron spec, or "-" to disable pruning.
	PruneSchedule string `yaml:"prune_schedule"`
}

// LogConfig is the `log` section.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json.
	Format string `yaml:"format"`
}

// DefaultConfig returns the configuration used when no file is given, and
// the value of every key a file leaves out. Its values are the ...Default
// constants of the prescient, slots and guards packages.
func DefaultConfig() *Config {
	return &Config{
		Database: DatabaseConfig{
			Path:           DatabasePathDefault,
			BusyTimeout:    BusyTimeoutDefault,
			StartupTimeout: StartupTimeoutDefault,
		},
		Slots: SlotsConfig{
			Resolution: Duration(slots.ResolutionDefault),
			Cycle:      Duration(slots.CycleDefault),
		},
		Ownership: OwnershipConfig{
			Static:        map[string][]int{},
			Heartbeat:     Duration(prescient.HeartbeatDefault),
			ServerTimeout: Duration(prescient.ServerTimeoutDefault),
		},
		Guards: GuardsConfig{
			MaxChecks: guards.MaxChecksDefault,
			Runtime:   Duration(guards.RuntimeDefault),
			Horizon:   Duration(guards.HorizonDefault),
		},
		Retry: RetryConfig{
			MaxFailures:   prescient.MaxFailuresDefault,
			MaxUnfinished: prescient.MaxUnfinishedDefault,
			BackoffMax:    Duration(prescient.RetryBackoffMaxDefault),
		},
		Workers:       prescient.WorkersDefault,
		BatchSize:     prescient.BatchSizeDefault,
		GroupSize:     prescient.GroupSizeDefault,
		GroupDuration: Duration(prescient.GroupDurationDefault),
		Sweep: SweepConfig{
			Mode:     string(prescient.SweepRun),
			Schedule: prescient.SweepScheduleDefault,
			OnStart:  true,
		},
		History: HistoryConfig{
			Retention:     Duration(prescient.HistoryRetentionDefault),
			PruneSchedule: prescient.PruneScheduleDefault,
		},
		ShutdownGrace: Duration(prescient.ShutdownGraceDefault),
		Log:           LogConfig{Level: LogLevelDefault, Format: LogFormatDefault},
		Sinks:         map[string]SinkConfig{},
		API:           APIConfig{TokenEnv: APITokenEnvDefault},
		Checks:        map[string]CheckConfig{},
	}
}

// Duration is a time.Duration written in YAML as a Go duration string
// ("15m", "1h30m", "0s"). The plain value -1 stands for the special value -1
// that some keys use to mean "no limit" or "forever".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string; a bad value is an error naming
// the line and the value.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) {
	if d == -1 {
		return -1, nil
	}
	return time.Duration(d).String(), nil
}

// String returns the duration as Go prints it ("15m0s"), and -1 as it is
// written (not "-1ns").
func (d Duration) String() string {
	if d == -1 {
		return "-1"
	}
	return time.Duration(d).String()
}

func parseDuration(n *yaml.Node) (Duration, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, fmt.Errorf("a duration must be a string such as \"15m\", not a %s", kindName(n.Kind))
	}
	if n.Value == "-1" {
		return -1, nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %s (want a Go duration such as \"90s\", \"15m\" or \"1h30m\", or -1 where allowed)%s", quoteValue(n.Value), durationHint(n.Value))
	}
	return Duration(v), nil
}

// Written days or weeks, and a duration past what Go's holds, for
// durationHint.
var (
	daysRE     = regexp.MustCompile(`(?i)^\s*(\d+(?:\.\d+)?)\s*(d|days?|w|weeks?)\s*$`)
	durationRE = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)
)

// durationHint says what is wrong with s, a duration, where a user is likely
// not to know: Go's durations have no days or weeks, and end at about 292
// years. It is a clause to append to an error, or "" otherwise.
func durationHint(s string) string {
	if m := daysRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.ParseFloat(m[1], 64)
		hours := n * 24
		if strings.HasPrefix(strings.ToLower(m[2]), "w") {
			hours = n * 24 * 7
		}
		return fmt.Sprintf(": Go durations have no days or weeks, write %sh", strconv.FormatFloat(hours, 'f', -1, 64))
	}
	if _, err := time.ParseDuration(s); err != nil && durationRE.MatchString(s) {
		return ": too long, a duration ends at 2562047h (about 292 years)"
	}
	return ""
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.AliasNode:
		return "alias"
	}
	return "scalar"
}

// ConfigError is a problem with one key of the configuration: which file,
// which line (0 when the key is not in the file, e.g. a default or an
// environment override), which key path (e.g. "slots.resolution") and what
// was wrong.
type ConfigError struct {
	File string
	Line int
	Key  string
	Err  error
}

// Error reads "file:line: key.path: what was wrong".
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads the YAML file at path on top of DefaultConfig, expanding
// environment variables in the file first (see Config), and applies the
// PRESCIENT_DATABASE_URL and PRESCIENT_SERVER overrides. An empty path means
// no file: the defaults plus the overrides. Decoding is strict: an unknown
// or repeated key, a value of the wrong type, a null, a second YAML document,
// a syntax error or a variable that is not set is a *ConfigError naming the
// line (and the key path, for a key). LoadConfig does not call Validate.
func LoadConfig(path string) (*Config, error) {
	return loadConfig(path, os.LookupEnv)
}

func loadConfig(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	cfg := DefaultConfig()
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if err := cfg.decode(path, raw, lookupEnv); err != nil {
			return nil, err
		}
		cfg.file = path
	}
	for _, o := range []struct {
		key, name string
		dst       *string
	}{{"database.url", EnvDatabaseURL, &cfg.Database.URL}, {"server", EnvServer, &cfg.Server}} {
		if v, _ := lookupEnv(o.name); v != "" {
			if cfg.env == nil {
				cfg.env = make(map[string]string)
			}
			*o.dst, cfg.env[o.key] = v, o.name
		}
	}
	return cfg, nil
}

// source names where the value of a key came from in an error: the key
// path, or the environment variable that overrode it.
func (c *Config) source(key string) string {
	if name, ok := c.env[key]; ok {
		return name + " (overriding " + key + ")"
	}
	return key
}

// ParseConfig decodes YAML in data on top of DefaultConfig, as LoadConfig
// does for a file (environment variables are expanded; the overrides are not
// applied). name is used in error messages.
func ParseConfig(name string, data []byte) (*Config, error) {
	cfg := DefaultConfig()
	if err := cfg.decode(name, data, os.LookupEnv); err != nil {
		return nil, err
	}
	cfg.file = name
	return cfg, nil
}

func (c *Config) decode(name string, raw []byte, lookupEnv func(string) (string, bool)) error {
	data, refErrs := expandEnv(raw, lookupEnv)
	root, err := parseDocument(name, data)
	if err != nil || root == nil {
		return refErrs.withQuoteHints(err) // nil, nil: a file without keys, all defaults
	}
	if errs := refErrs.in(name, root); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if errs := refErrs.misread(name, root); len(errs) > 0 {
		return errors.Join(errs...)
	}
	if root.Kind != yaml.MappingNode {
		return &ConfigError{File: name, Line: root.Line, Err: fmt.Errorf("the file must be a mapping of keys, not a %s", kindName(root.Kind))}
	}
	// Walk the tree first: it knows each value's key path, so its errors name
	// "slots.resolution" where the decoder would name a Go type. It also
	// refuses what the decoder would bend (1.9 into 1, null into the
	// default), and turns an empty string value into "".
	c.lines = make(map[string]int)
	if errs := walk(name, root, reflect.TypeOf(*c), "", c.lines); len(errs) > 0 {
		return refErrs.withQuoteHints(errors.Join(errs...))
	}
	if err := root.Decode(c); err != nil {
		return &ConfigError{File: name, Err: err}
	}
	return nil
}

// yamlLineRE finds the line in a syntax error of the YAML parser.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// checkListen checks a listen address as net.Listen will read it, port
// included: ":99999" passed the configuration check and failed at run.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}

// yamlReaderLine returns the line of the first byte yaml.v3's reader refuses,
// for its errors about them (which give no line), and false for another
// error.
func yamlReaderLine(data []byte, msg string) (int, bool) {
	var bad func(l []byte) bool
	switch msg {
	case "control characters are not allowed":
		bad = func(l []byte) bool { return bytes.ContainsFunc(l, yamlUnprintable) }
	case "invalid leading UTF-8 octet", "invalid trailing UTF-8 octet", "incomplete UTF-8 octet sequence", "invalid length of a UTF-8 sequence":
		bad = func(l []byte) bool { return !utf8.Valid(l) }
	default:
		return 0, false
	}
	for i, l := range bytes.Split(data, []byte("\n")) {
		if bad(l) {
			return i + 1, true
		}
	}
	return 0, true
}

// yamlUnprintable reports whether YAML refuses r in a document: the C0 and
// C1 controls but tab, line feed, carriage return and NEL (U+0085), DEL,
// and U+FFFE and U+FFFF.
func yamlUnprintable(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r' || r == 0x85:
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f, r == 0xfffe, r == 0xffff:
		return true
	}
	return false
}

// yamlCommentRE finds where a comment starts on a line: a # at its start or
// after white space.
var yamlCommentRE = regexp.MustCompile(`(^|\s)#`)

// yamlAnchorRE finds the name in yaml.v3's error for an alias to an anchor
// the file does not define, which gives no line.
var yamlAnchorRE = regexp.MustCompile(`^unknown anchor '(.+)' referenced$`)

// yamlAnchorInRE finds the same within an error message.
var yamlAnchorInRE = regexp.MustCompile(`unknown anchor '.+' referenced`)

// yamlParserProblems are the problems yaml.v3's parser (not its scanner)
// reports. For them it gives the line before the one it means: the line of
// a mark it counts from 0 (the construct the problem is in, such as an
// unclosed "{", or else where it found the problem), where the scanner's
// problems are counted from 1.
var yamlParserProblems = regexp.MustCompile(`^(did not find expected (',' or '\]'|',' or '\}'|'-' indicator|<document start>|<stream-start>|key|node content)|found duplicate %(TAG|YAML) directive|found incompatible YAML document|found undefined tag handle)$`)

// parseDocument parses data as one YAML document and returns its root node,
// or nil when it holds no keys (an empty file, or only comments). A second
// document is an error at the line of the "---" or "..." that separates it:
// yaml.v3 reads the first document only, and would silently drop every key
// after the marker.
func parseDocument(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, nil
	} else if err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		var line int
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = err.Error()[len(m[0]):]
			if yamlParserProblems.MatchString(msg) {
				line++
			}
		} else if m := yamlAnchorRE.FindStringSubmatch(msg); m != nil {
			// Reported with no line at all: the first use of the name, as
			// an alias (not a longer name, nor in a comment).
			alias := regexp.MustCompile(`(^|[\s\[{,:-])\*` + regexp.QuoteMeta(m[1]) + `($|[\s,\]}])`)
			for i, l := range bytes.Split(data, []byte("\n")) {
				if c := yamlCommentRE.FindIndex(l); c != nil {
					l = l[:c[0]]
				}
				if alias.Match(l) {
					line = i + 1
					break
				}
			}
		} else if l, ok := yamlReaderLine(data, msg); ok {
			line = l
		} else {
			// yaml.v3 leaves the line out when its mark, counted from 0,
			// is 0: the problem is on the first line.
			line = 1
		}
		if last := lastContentLine(data); line > last && last > 0 && strings.HasPrefix(msg, "did not find expected") {
			// The parser reached the end of the file looking for what a
			// line opened ("log: {"): it names the line after the last.
			line, msg = last, msg+" (at the end of the file: a bracket or quote opened on this line or before is not closed)"
		}
		if lines := bytes.Split(data, []byte("\n")); line > 0 && line <= len(lines) && bytes.ContainsRune(lines[line-1], '\t') {
			msg += " (the line holds a tab: YAML indents with spaces only)"
		}
		return nil, &ConfigError{File: name, Line: line, Err: fmt.Errorf("not valid YAML: %s", msg)}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line, marker := documentMarker(data, doc.Line)
		what := fmt.Sprintf("%q starts a second YAML document", marker)
		if marker == "..." {
			what = `"..." ends the YAML document`
		}
		return nil, &ConfigError{File: name, Line: line, Err: fmt.Errorf("%s, and prescient reads one: "+
			"every key after this line would be ignored (remove the line, and keep all keys in one document)", what)}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" && root.Value == "" {
		return nil, nil // "---" and comments
	}
	return root, nil
}

// lastContentLine returns the number of the last line of data that holds
// more than white space and a comment, 0 for none.
func lastContentLine(data []byte) int {
	last := 0
	for i, l := range bytes.Split(data, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 && l[0] != '#' {
			last = i + 1
		}
	}
	return last
}

// documentMarker returns the first line after line after that is a document
// marker ("---" or "...", at the start of the line), and the marker. Such a
// line is a marker wherever it is: YAML forbids it inside a scalar.
func documentMarker(data []byte, after int) (int, string) {
	for i, l := range bytes.Split(data, []byte("\n")) {
		if i+1 <= after || len(l) < 3 {
			continue
		}
		if m := string(l[:3]); (m == "---" || m == "...") && (len(l) == 3 || strings.ContainsRune(" \t\r", rune(l[3]))) {
			return i + 1, m
		}
	}
	return 0, "---"
}

// expandEnv replaces ${NAME} and $NAME in raw with the value of the
// environment variable NAME, and $$ with $. A reference it cannot expand (a
// variable that is not set, a $ that starts no reference) becomes a marker,
// plain YAML text that envRefErrors.in finds again in the parsed document:
// only the markers that land in a key or value are errors, so that comments
// may mention ${NAME} or a lone $.
func expandEnv(raw []byte, lookupEnv func(string) (string, bool)) ([]byte, *envRefErrors) {
	refs := &envRefErrors{marker: "prescientenv" + strings.ToLower(rand.Text())}
	var b bytes.Buffer
	line := 1
	lineStart, outLineStart := 0, 0 // where the line begins in raw and in b
	// echoes says the error names what was written, which may be part of a
	// password (see envRefErrors.in).
	bad := func(err error, echoes bool) {
		fmt.Fprintf(&b, "%s%d_", refs.marker, len(refs.errs))
		refs.errs = append(refs.errs, envRefError{line: line, err: err, echoes: echoes})
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '$' {
			if c == '\n' {
				line++
				lineStart, outLineStart = i+1, b.Len()+1
			}
			b.WriteByte(c)
			i++
			continue
		}
		rest := raw[i+1:]
		var name, ref string
		switch {
		case len(rest) > 0 && rest[0] == '$':
			b.WriteByte('$')
			i += 2
			continue
		case len(rest) > 0 && rest[0] == '{':
			end := bytes.IndexByte(rest, '}')
			if nl := bytes.IndexByte(rest, '\n'); end < 0 || (nl >= 0 && nl < end) {
				bad(errors.New("${ has no closing } on its line: write ${NAME}, or $$ for a literal $"), false)
				i += 2
				continue
			}
			name, ref = string(rest[1:end]), string(raw[i:i+end+2])
			if envNameLen(name) != len(name) || name == "" {
				bad(fmt.Errorf("%s is not a variable reference: a name is letters, digits and '_', not starting with a digit; write $$ for a literal $", ref), true)
				i += len(ref)
				continue
			}
		default:
			n := envNameLen(rest)
			if n == 0 {
				// Not echoed: the value may be a password.
				bad(errors.New("a $ that starts no variable: write $$ for a literal $, or ${NAME} or $NAME for a variable"), false)
				refs.errs[len(refs.errs)-1].param = len(rest) > 0 && '0' <= rest[0] && rest[0] <= '9'
				i++
				continue
			}
			name, ref = string(rest[:n]), "$"+string(rest[:n])
		}
		v, ok := lookupEnv(name)
		// A secret file's trailing line break is not part of the value.
		given := v
		v = strings.TrimRight(v, "\r\n")
		switch {
		case !ok:
			// A ${NAME} is written on purpose; a $NAME may be a piece of a
			// password that holds a $.
			bad(fmt.Errorf("%s is not set (write $$ for a literal $)", ref), ref[1] != '{')
		case given != "" && v == "":
			// A secret mounted empty: not the empty value written on purpose.
			bad(fmt.Errorf("%s holds only line breaks", ref), ref[1] != '{')
		case strings.ContainsAny(v, "\r\n\u0085\u2028\u2029"): // YAML's line breaks
			// Pasted in, it would end the line: the value would be cut,
			// and every later error would name the wrong line.
			bad(fmt.Errorf("%s holds a line break inside its value: a value in the file is one line (remove the line break from the variable)", ref), ref[1] != '{')
		default:
			lineEnd := bytes.IndexByte(raw[i:], '\n')
			if lineEnd < 0 {
				lineEnd = len(raw) - i
			}
			e := envExpansion{line: line, ref: ref, value: v, col: utf8.RuneCount(b.Bytes()[outLineStart:])}
			e.quote, e.whole = wholeValue(string(raw[lineStart:i]), string(raw[i+len(ref):i+lineEnd]))
			refs.expanded = append(refs.expanded, e)
			b.WriteString(v)
		}
		i += len(ref)
	}
	return b.Bytes(), refs
}

// envNameLen returns the length of the variable name at the start of s: a
// letter or '_', then letters, digits and '_'.
func envNameLen[S string | []byte](s S) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(s)
}

// envRefErrors are the references expandEnv could not expand, each replaced
// by marker, its index and '_'.
type envRefErrors struct {
	marker string
	errs   []envRefError
	// expanded are the references expandEnv replaced by their values.
	expanded []envExpansion
}

// envExpansion is a reference replaced by its variable's value, on line,
// at column col (from 0, in characters) of the expanded line.
type envExpansion struct {
	line, col  int
	ref, value string
	// whole says the reference is the whole of a block value (url:
	// ${DATABASE_URL}, - ${X}), between quote, if any.
	whole bool
	quote string
}

var (
	// wholeBefore matches what may come before a reference that is a
	// whole value on its line: a key and ": ", list dashes, a quote.
	wholeBefore = regexp.MustCompile(`^\s*(?:- +)*(?:[^#"'\s-][^#]*?: +)?(["']?)$`)
	// wholeAfter matches what may come after one: the closing quote, and a
	// comment.
	wholeAfter = regexp.MustCompile(`^(["']?)[ \t]*(?:#.*)?\r?$`)
)

// wholeValue reports whether a reference between before and after (the
// rest of its line in the file) is a whole value, and its quote.
func wholeValue(before, after string) (quote string, whole bool) {
	b, a := wholeBefore.FindStringSubmatch(before), wholeAfter.FindStringSubmatch(after)
	if b == nil || a == nil || b[1] != a[1] {
		return "", false
	}
	return b[1], true
}

// quoteHint names the references expanded on line, for an error there: a
// value is inserted as it is, and one holding YAML syntax (": ", " #", a
// leading [, {, *, &, !, |, > or a quote) changes what the line says, which
// the error alone does not tell (the value is not shown: it may be a
// password).
func (r *envRefErrors) quoteHint(line int) string {
	var refs []string
	for _, e := range r.expanded {
		if e.line == line && !slices.Contains(refs, e.ref) {
			refs = append(refs, e.ref)
		}
	}
	if len(refs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the line holds %s, expanded before the file is read as YAML: "+
		"if a value may hold YAML syntax, write the value between single quotes, '%s')", strings.Join(refs, ", "), refs[0])
}

// withQuoteHints adds quoteHint to each *ConfigError in err (one, or
// several joined) at a line where a reference was expanded.
func (r *envRefErrors) withQuoteHints(err error) error {
	if err == nil || len(r.expanded) == 0 {
		return err
	}
	hint := func(e error) error {
		var ce *ConfigError
		if errors.As(e, &ce) && ce.Line > 0 {
			if h := r.quoteHint(ce.Line); h != "" {
				c := *ce
				msg := ce.Err.Error()
				// An alias is named after what follows its *, which here
				// may be a password's: not shown.
				msg = yamlAnchorInRE.ReplaceAllString(msg, "unknown anchor (name not shown) referenced")
				c.Err = fmt.Errorf("%s%s", msg, h)
				return &c
			}
		}
		return e
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := slices.Clone(j.Unwrap())
		for i, e := range errs {
			errs[i] = hint(e)
		}
		return errors.Join(errs...)
	}
	return hint(err)
}

// misread returns an error for each expanded value YAML did not read as
// it is. A reference that is a whole value (url: ${DATABASE_URL}) must be
// read as its variable's value, character for character: one that holds
// YAML syntax is otherwise read as something else without a word (a
// password "s3cret #1" as "s3cret", "#s3cret" as nothing, "!pw" or "&a pw"
// as a tag or an anchor taken off, "pa\tss" between double quotes with a
// tab). Within a larger value (postgres://u:${P}@db), a " #" that cut the
// value is found in the line's comment.
func (r *envRefErrors) misread(file string, root *yaml.Node) []error {
	var scalars []*yaml.Node
	var visit func(n *yaml.Node)
	visit = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode {
			scalars = append(scalars, n)
		}
		for _, c := range n.Content {
			visit(c)
		}
	}
	visit(root)
	var errs []error
	for _, e := range r.expanded {
		if e.value == "" {
			continue // nothing, as written on purpose
		}
		if e.whole {
			var at *yaml.Node
			inside := false // a line of a scalar that began on a line before
			for _, n := range scalars {
				if n.Line == e.line && n.Column-1 == e.col-len(e.quote) {
					at = n
				}
				inside = inside || n.Line < e.line && strings.Contains(n.Value, e.value)
			}
			if at == nil && inside || at != nil && at.Value == e.value {
				continue
			}
			errs = append(errs, &ConfigError{File: file, Line: e.line, Err: fmt.Errorf(
				"YAML does not read the value of %s as it is: it holds YAML syntax (a leading #, !, & or *, \" #\", spaces at its ends) "+
					"or, between double quotes, a backslash or a \": write the reference between single quotes, '%s' "+
					"(a ' in the value must then be doubled), or change the variable", e.ref, e.ref)})
			continue
		}
		k := strings.Index(e.value, " #")
		if t := strings.Index(e.value, "\t#"); t >= 0 && (k < 0 || t < k) {
			k = t
		}
		if k < 0 {
			continue
		}
		rest := e.value[k+1:]
		for _, n := range scalars {
			// A reference written in the comment itself leaves its whole
			// value there: not a cut.
			if n.Line == e.line && n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 &&
				strings.Contains(n.LineComment, rest) && !strings.Contains(n.LineComment, e.value) {
				errs = append(errs, &ConfigError{File: file, Line: e.line, Err: fmt.Errorf(
					"the value of %s holds \" #\", and YAML read the rest of the line from there as a comment, "+
						"cutting the value: write the whole value between single quotes ('…%s…')", e.ref, e.ref)})
				break
			}
		}
	}
	return errs
}

type envRefError struct {
	line int
	err  error
	// echoes says err names what the file holds at the reference: a
	// $NAME, or a ${...} that is not a reference.
	echoes bool
	// param says the $ comes before a digit: $1 is a SQL parameter in a
	// declared check's query (see sqlParams), an error elsewhere.
	param bool
}

// in returns a *ConfigError for every marker in a key or value of the
// document under n, in the order of the file. Where the reference may be
// part of a password (see secretAt) and its error would echo it, the error
// names the key instead: pa$word in a URL reads as a variable "word".
func (r *envRefErrors) in(file string, n *yaml.Node) []error {
	if len(r.errs) == 0 {
		return nil
	}
	re := regexp.MustCompile(regexp.QuoteMeta(r.marker) + `(\d+)_`)
	found := make(map[int]bool)
	secret := make(map[int]string) // index -> key path of a secret value
	var visit func(n *yaml.Node, path string, value bool)
	visit = func(n *yaml.Node, path string, value bool) {
		if value {
			n.Value = r.sqlParams(re, path, n.Value)
		}
		for _, m := range re.FindAllStringSubmatchIndex(n.Value, -1) {
			i, _ := strconv.Atoi(n.Value[m[2]:m[3]])
			found[i] = true
			if value && secretAt(path, n.Value, m[0], m[1]) {
				secret[i] = re.ReplaceAllString(path, "$$…")
			}
		}
		switch n.Kind {
		case yaml.MappingNode:
			for j := 0; j+1 < len(n.Content); j += 2 {
				visit(n.Content[j], path, false)
				visit(n.Content[j+1], join(path, n.Content[j].Value), true)
			}
		case yaml.SequenceNode:
			for j, c := range n.Content {
				visit(c, fmt.Sprintf("%s[%d]", path, j), true)
			}
		default:
			for _, c := range n.Content {
				visit(c, path, value)
			}
		}
	}
	visit(n, "", true)
	var errs []error
	seen := make(map[string]bool) // the same error twice says nothing more
	for i, e := range r.errs {
		if !found[i] {
			continue
		}
		ce := &ConfigError{File: file, Line: e.line, Err: e.err}
		if key, ok := secret[i]; ok && e.echoes {
			ce.Key, ce.Err = key, errors.New("a $ where the value may hold a password "+
				"does not start a variable that is set (not shown): write $$ for a literal $, or ${NAME} for a variable")
		}
		if !seen[ce.Error()] {
			seen[ce.Error()] = true
			errs = append(errs, ce)
		}
	}
	return errs
}

// credentialsRE matches a value that may hold a password: a URL with
// userinfo (scheme://user:password@host) or a password= parameter.
var credentialsRE = regexp.MustCompile(`(?i)[a-z][a-z0-9+.-]*://[^\s]*@|pass(word|wd)?\s*=|pwd\s*=`)

// mayHoldCredentials reports whether an error must not echo s.
func mayHoldCredentials(s string) bool { return credentialsRE.MatchString(s) }

// notShown stands in an error for a value that may hold a password.
const notShown = "<value not shown: it may hold a password>"

// quoteValue returns s quoted for an error message, or notShown when s may
// hold a password.
func quoteValue(s string) string {
	if mayHoldCredentials(s) {
		return notShown
	}
	return strconv.Quote(s)
}

// secretAt reports whether v[start:end] of the value at key path may be part
// of a password: in the userinfo, query or fragment of a URL, or anywhere in
// database.url when it is not a URL (key=value form) or in a value holding
// password=. A value made of nothing else is not.
func secretAt(path, v string, start, end int) bool {
	if start == 0 && end == len(v) {
		return false
	}
	s := strings.Index(v, "://")
	if s < 0 {
		return path == "database.url" || mayHoldCredentials(v)
	}
	s += len("://")
	host := s
	if at := strings.LastIndexByte(v, '@'); at > s {
		if start < at && end > s {
			return true // userinfo
		}
		host = at
	}
	q := strings.IndexAny(v[host:], "?#")
	return q >= 0 && end > host+q
}

var durationType = reflect.TypeOf(Duration(0))

// walk checks node against the type t at key path, recording the line of
// every key, and returns an error per unknown or repeated key and per value
// the decoder would refuse or bend: a fraction for an integer (it would
// truncate 1.9 to 1) and a null (it would keep the default). An empty value,
// "key:" and nothing after it, is the empty string for a string, a section
// without keys for a section, and an error otherwise; walk rewrites such a
// node so that the decoder reads it so.
func walk(file string, n *yaml.Node, t reflect.Type, path string, lines map[string]int) []error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	fail := func(err error) []error {
		return []error{&ConfigError{File: file, Line: n.Line, Key: path, Err: err}}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		if err := null(n, t, path); err != nil {
			return fail(err)
		}
		return nil
	}
	switch {
	case t == durationType:
		if _, err := parseDuration(n); err != nil {
			return fail(err)
		}
		return nil
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return fail(fmt.Errorf("want a mapping of keys (%s), got a %s", strings.Join(fieldNames(t), ", "), kindName(n.Kind)))
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := join(path, k.Value)
			f, ok := fieldByTag(t, k.Value)
			if !ok {
				errs = append(errs, &ConfigError{File: file, Line: k.Line, Key: kp,
					Err: fmt.Errorf("unknown key %q (known keys%s: %s)", k.Value, under(path), strings.Join(fieldNames(t), ", "))})
				continue
			}
			if l, ok := lines[kp]; ok {
				errs = append(errs, &ConfigError{File: file, Line: k.Line, Key: kp, Err: fmt.Errorf("is already set on line %d (keep one)", l)})
				continue
			}
			lines[kp] = k.Line
			errs = append(errs, walk(file, v, f.Type, kp, lines)...)
		}
		return errs
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fail(fmt.Errorf("want a mapping, got a %s", kindName(n.Kind)))
		}
		var errs []error
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := join(path, k.Value)
			if k.Kind == yaml.ScalarNode && k.Tag == "!!null" {
				// The decoder drops the entry without a word.
				errs = append(errs, &ConfigError{File: file, Line: k.Line, Key: path,
					Err: fmt.Errorf("a key is null (%s): name it, in quotes if the name is %q", orEmpty(k.Value), "null")})
				continue
			}
			if l, ok := lines[kp]; ok {
				errs = append(errs, &ConfigError{File: file, Line: k.Line, Key: kp, Err: fmt.Errorf("is already set on line %d (keep one)", l)})
				continue
			}
			lines[kp] = k.Line
			errs = append(errs, walk(file, v, t.Elem(), kp, lines)...)
		}
		return errs
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fail(fmt.Errorf("want a list, got a %s", kindName(n.Kind)))
		}
		var errs []error
		for i, v := range n.Content {
			errs = append(errs, walk(file, v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), lines)...)
		}
		return errs
	default:
		if n.Kind != yaml.ScalarNode {
			return fail(fmt.Errorf("want a single %s value, got a %s", t.Kind(), kindName(n.Kind)))
		}
		if k := t.Kind(); k == reflect.Int || k == reflect.Int32 || k == reflect.Int64 {
			if (n.Tag == "!!int" || n.Tag == "!!float") && leadingZeroRE.MatchString(n.Value) {
				// YAML reads 010 as octal 8, and 09 as a float.
				return fail(fmt.Errorf("%s starts with 0, which YAML does not read as a decimal number (010 is octal 8): "+
					"write it without the leading zeros (0o... if octal is meant)", n.Value))
			}
			switch n.Tag {
			case "!!int":
			case "!!float":
				return fail(fmt.Errorf("must be a whole number, got %s", n.Value))
			default:
				if _, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
					return fail(fmt.Errorf("%s is not a valid integer (write it without quotes)", quoteValue(n.Value)))
				}
				return fail(fmt.Errorf("%s is not a valid integer", quoteValue(n.Value)))
			}
		}
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return fail(fmt.Errorf("%s is not a valid %s", quoteValue(n.Value), typeName(t)))
		}
		return nil
	}
}

// leadingZeroRE matches an integer written with leading zeros, which YAML
// reads as octal (batch_size: 010 was 8).
var leadingZeroRE = regexp.MustCompile(`^[-+]?0[0-9_]+$`)

// orEmpty returns s, or "nothing" when s is empty, for a message quoting
// what was written.
func orEmpty(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}

// null checks a null value n of type t at key path. Written out (null, ~) it
// is an error: the decoder would keep the default, which is what leaving
// the key out says. Empty, it is "" for a string and no keys for a section
// or map, and n is rewritten so; an error for other types.
func null(n *yaml.Node, t reflect.Type, path string) error {
	section := t.Kind() == reflect.Struct && t != durationType
	if n.Value == "" {
		switch {
		case t.Kind() == reflect.String:
			n.Tag = "!!str"
			return nil
		case section:
			return nil
		case t.Kind() == reflect.Map:
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
			return nil
		}
	}
	var instead string // what leaving the key out means
	if def, ok := defaultText(path); ok {
		instead = "remove the key to get the default, " + def
	} else if section {
		instead = "remove the key to keep the defaults of its keys"
	}
	what := n.Value + " is not a value"
	if n.Value == "" {
		what = "has no value"
	}
	switch {
	case instead == "":
		return fmt.Errorf("%s (write %s, or remove the key)", what, example(t))
	case n.Value == "":
		return fmt.Errorf("%s (write %s, or %s)", what, example(t), instead)
	}
	return fmt.Errorf("%s (%s)", what, instead)
}

// defaultText returns the default of key path as the file would write it,
// or false when DefaultConfig has no single value there (a section, an entry
// of a map or list).
func defaultText(path string) (string, bool) {
	v, ok := DefaultConfig().valueAt(path)
	if !ok {
		return "", false
	}
	switch x := v.Interface().(type) {
	case Duration:
		return x.String(), true
	case string:
		return strconv.Quote(x), true
	case int, int32, bool:
		return fmt.Sprint(x), true
	case map[string][]int:
		if len(x) == 0 {
			return "{}", true
		}
	}
	return "", false
}

// valueAt returns the value of key path in c, or false when path does not
// name a field (a key of a map, an element of a list).
func (c *Config) valueAt(path string) (reflect.Value, bool) {
	v := reflect.ValueOf(*c)
	for _, k := range strings.Split(path, ".") {
		if v.Kind() != reflect.Struct || v.Type() == durationType {
			return reflect.Value{}, false
		}
		f, ok := fieldByTag(v.Type(), k)
		if !ok {
			return reflect.Value{}, false
		}
		v = v.FieldByIndex(f.Index)
	}
	return v, true
}

// stringAt returns the string at key path in c, "" when it is not a string.
func (c *Config) stringAt(path string) string {
	if v, ok := c.valueAt(path); ok && v.Kind() == reflect.String {
		return v.String()
	}
	return ""
}

// example names a value of type t for "write ...".
func example(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 15m"
	case t.Kind() == reflect.Slice:
		return "a list such as [0, 1]"
	case t.Kind() == reflect.Map:
		return "a mapping"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "a string"
	}
	return "a whole number"
}

func typeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	}
	return t.Kind().String()
}

func under(path string) string {
	if path == "" {
		return " at the top level"
	}
	return " under " + path
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == key && tag != "" && tag != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

// keyCheck validates one key: apply sets it (and anything it depends on) on
// a valid baseline, so that the engine's Validate failing names this key.
type keyCheck struct {
	key string
	// uses are the other keys apply sets: when one of them is already
	// reported, this key's check would only repeat that error.
	uses  []string
	apply func(pc *prescient.Config)
}

// durationRule is what a duration key accepts besides the values the engine
// checks: the engine reads 0 as "the default", and -1 as -1ns where it is not
// "no limit".
type durationRule struct {
	key string
	v   Duration
	// zero says 0s is a value of its own for this key.
	zero bool
	// minusOne says -1 is a value of its own for this key.
	minusOne bool
	// want says what the key accepts, after "must be".
	want string
	// min is the shortest value that can work, and why, after "must be at
	// least min"; durationMin when why is empty.
	min Duration
	why string
}

// durationMin is the shortest duration any key accepts (besides 0s and -1
// where a key gives them a meaning of their own): the engine's grid, clocks
// and database timestamps work in milliseconds.
const durationMin = Duration(time.Millisecond)

// Minimums of the keys that need more than durationMin to work.
const (
	// heartbeatMin is the shortest ownership.heartbeat: each heartbeat is a
	// write to the database.
	heartbeatMin = Duration(100 * time.Millisecond)
	// serverTimeoutMin is the shortest ownership.server_timeout: it must
	// cover a late heartbeat and the clock difference between hosts, or live
	// servers are taken for gone.
	serverTimeoutMin = Duration(time.Second)
	// runtimeMin is the shortest guards.runtime: a check runs in a database
	// transaction, and a shorter limit would end it before a round trip.
	runtimeMin = Duration(10 * time.Millisecond)
)

// Upper bounds of the count keys: a value past them is a typo, not a
// deployment, and is refused rather than bent.
const (
	// workersMax is the most workers: each running group of checks is a
	// goroutine and a transaction holding a database connection, and no
	// database serves one server that many connections (PostgreSQL's
	// max_connections is 100 by default).
	workersMax = 10_000
	// jobsPerGroupMax is the most batch_size and group_size (and a declared
	// check's batch_size): the engine lists at most 10,000 due jobs at a
	// time (prescient's dispatch page), so a group or a batch call is never
	// handed more, and a larger value would silently mean 10,000.
	jobsPerGroupMax = 10_000
)

// Validate reports every key whose value the engine would refuse, or would
// silently replace by its default (a 0 where the engine reads "the default"),
// each as a *ConfigError naming the key path and, when the key is in the
// file, its line. Overlapping ownership is not an error (see
// slots.Ownership.Check).
func (c *Config) Validate() error {
	full := c.clientConfig()
	base := DefaultConfig().clientConfig()
	base.Server = "prescient"
	grid := []string{"slots.resolution", "slots.offset", "slots.cycle"}
	checks := []keyCheck{
		{"server", nil, func(pc *prescient.Config) { pc.Server = full.Server }},
		{"slots.resolution", nil, func(pc *prescient.Config) {
			pc.Grid = slots.Grid{Resolution: full.Grid.Resolution}
		}},
		{"slots.offset", grid[:1], func(pc *prescient.Config) {
			pc.Grid = slots.Grid{Resolution: full.Grid.Resolution, Offset: full.Grid.Offset}
		}},
		{"slots.cycle", grid[:2], func(pc *prescient.Config) { pc.Grid = full.Grid }},
		{"ownership.static", grid, func(pc *prescient.Config) { pc.Grid, pc.Ownership = full.Grid, full.Ownership }},
		{"ownership.auto", grid, func(pc *prescient.Config) {
			pc.AutoOwnership = full.AutoOwnership
			if full.AutoOwnership {
				pc.Grid, pc.Ownership = full.Grid, full.Ownership
			}
		}},
		{"ownership.heartbeat", nil, func(pc *prescient.Config) { pc.Heartbeat = full.Heartbeat }},
		{"ownership.server_timeout", []string{"ownership.heartbeat"}, func(pc *prescient.Config) {
			pc.Heartbeat, pc.ServerTimeout = full.Heartbeat, full.ServerTimeout
		}},
		{"guards.max_checks", nil, func(pc *prescient.Config) { pc.Guards.MaxChecks = full.Guards.MaxChecks }},
		{"guards.runtime", nil, func(pc *prescient.Config) { pc.Guards.Runtime = full.Guards.Runtime }},
		{"guards.horizon", nil, func(pc *prescient.Config) { pc.Guards.Horizon = full.Guards.Horizon }},
		{"retry.max_failures", nil, func(pc *prescient.Config) { pc.MaxFailures = full.MaxFailures }},
		{"retry.max_unfinished", nil, func(pc *prescient.Config) { pc.MaxUnfinished = full.MaxUnfinished }},
		{"retry.backoff_max", nil, func(pc *prescient.Config) { pc.RetryBackoffMax = full.RetryBackoffMax }},
		{"workers", nil, func(pc *prescient.Config) { pc.Workers = full.Workers }},
		{"batch_size", nil, func(pc *prescient.Config) { pc.BatchSize = full.BatchSize }},
		{"group_size", nil, func(pc *prescient.Config) { pc.GroupSize = full.GroupSize }},
		{"group_duration", nil, func(pc *prescient.Config) { pc.GroupDuration = full.GroupDuration }},
		{"sweep.mode", nil, func(pc *prescient.Config) { pc.SweepMode = full.SweepMode }},
		{"sweep.schedule", nil, func(pc *prescient.Config) { pc.SweepSchedule = full.SweepSchedule }},
		{"history.retention", nil, func(pc *prescient.Config) { pc.HistoryRetention = full.HistoryRetention }},
		{"history.prune_schedule", nil, func(pc *prescient.Config) { pc.PruneSchedule = full.PruneSchedule }},
		{"shutdown_grace", nil, func(pc *prescient.Config) { pc.ShutdownGrace = full.ShutdownGrace }},
	}
	var errs []error
	reported := make(map[string]bool)
	secrets := c.secrets()
	bad := func(key string, err error) {
		reported[key] = true
		e := &ConfigError{File: c.file, Line: c.lines[key], Key: c.source(key), Err: redactErr(err, secrets, c.stringAt(key))}
		if _, ok := c.env[key]; ok {
			e.File, e.Line = "", 0 // the file's value, if any, is not the one refused
		}
		errs = append(errs, e)
	}
	// The zero values the engine would silently default are refused first:
	// a file that says workers: 0 means something, and it is not "10"
	// (negative counts too, in the file's words). So is a -1 the engine
	// would read as -1ns.
	ints := []struct {
		key  string
		v    int
		want string
	}{
		{"guards.max_checks", c.Guards.MaxChecks, "a positive number, or -1 for no limit"},
		{"retry.max_failures", c.Retry.MaxFailures, "at least 1"},
		{"retry.max_unfinished", c.Retry.MaxUnfinished, "at least 2"},
		{"workers", c.Workers, "at least 1"},
		{"batch_size", c.BatchSize, "at least 1"},
		{"group_size", c.GroupSize, "at least 1 (1 runs each check in a transaction of its own)"},
	}
	for _, k := range ints {
		if k.v == 0 || (k.v < 0 && !(k.v == -1 && k.key == "guards.max_checks")) {
			bad(k.key, fmt.Errorf("must be %s, got %d", k.want, k.v))
		}
	}
	// So are counts no server can use: workers: 1000000000 was accepted
	// (found by a trial of bad input), a typo taken for a deployment.
	for _, k := range []struct {
		key string
		v   int
		max int
		why string
	}{
		{"workers", c.Workers, workersMax, "each running group is a transaction holding a database connection"},
		{"batch_size", c.BatchSize, jobsPerGroupMax, "a server lists at most that many due jobs at a time, so no batch call is handed more"},
		{"group_size", c.GroupSize, jobsPerGroupMax, "a server lists at most that many due jobs at a time, so no group runs more"},
	} {
		if k.v > k.max {
			bad(k.key, fmt.Errorf("must be at most %d (%s), got %d", k.max, k.why, k.v))
		}
	}
	// So is an empty string: sweep.schedule: "" written to turn the
	// sweep off would have it run every 5 minutes.
	for _, k := range []struct{ key, v, want string }{
		{"sweep.mode", c.Sweep.Mode, "run or reslot"},
		{"sweep.schedule", c.Sweep.Schedule, `a cron spec (such as "*/5 * * * *"), or - for no scheduled sweep`},
		{"history.prune_schedule", c.History.PruneSchedule, `a cron spec (such as "17 * * * *"), or - for no pruning`},
	} {
		if k.v == "" {
			bad(k.key, fmt.Errorf("must be %s, got an empty value", k.want))
		}
	}
	durations := []durationRule{
		{"slots.resolution", c.Slots.Resolution, false, false, "positive (such as 15m)", 0, ""},
		{"slots.offset", c.Slots.Offset, true, false, "0s, or positive and less than slots.resolution (such as 5m)", 0, ""},
		{"slots.cycle", c.Slots.Cycle, true, false, "a multiple of slots.resolution (such as 1h), or 0s for a single position", 0, ""},
		{"ownership.heartbeat", c.Ownership.Heartbeat, false, false, "positive (such as 5s)",
			heartbeatMin, "each heartbeat is a write to the database"},
		{"ownership.server_timeout", c.Ownership.ServerTimeout, false, false, "positive and more than twice ownership.heartbeat (such as 30s)",
			serverTimeoutMin, "it must cover a late heartbeat and the clock difference between hosts"},
		{"guards.runtime", c.Guards.Runtime, false, false, "positive (such as 30s; it cannot be disabled)",
			runtimeMin, "a check runs in a database transaction, which takes longer to begin and commit"},
		{"guards.horizon", c.Guards.Horizon, false, true, "positive (such as 2160h), or -1 for no limit", 0, ""},
		{"retry.backoff_max", c.Retry.BackoffMax, false, false, "positive (such as 1h)", 0, ""},
		{"group_duration", c.GroupDuration, false, false, "positive (such as 1s)", 0, ""},
		{"history.retention", c.History.Retention, false, true, "positive (such as 720h), or -1 to keep forever", 0, ""},
		{"shutdown_grace", c.ShutdownGrace, false, false, "positive (such as 30s)", 0, ""},
		{"database.busy_timeout", c.Database.BusyTimeout, false, false,
			"positive (such as 60s), or left out to follow guards.runtime", 0, ""},
		{"database.startup_timeout", c.Database.StartupTimeout, false, true, "positive (such as 5m), or -1 to retry forever", 0, ""},
	}
	for _, r := range durations {
		switch {
		case r.v == 0 && !r.zero:
			bad(r.key, fmt.Errorf("must be %s, got 0s", r.want))
		case r.v == -1 && !r.minusOne:
			bad(r.key, fmt.Errorf("must be %s, got -1", r.want))
		case r.v > 0 && r.v < max(r.min, durationMin):
			msg := fmt.Sprintf("must be at least %s", max(r.min, durationMin))
			if r.zero {
				msg = "must be 0s, or at least " + durationMin.String()
			}
			if r.why != "" {
				msg += " (" + r.why + ")"
			}
			bad(r.key, fmt.Errorf("%s, got %s", msg, r.v))
		}
	}
	// A server name in the static map is reported at its own line.
	for _, name := range slices.Sorted(maps.Keys(c.Ownership.Static)) {
		if err := validServerName(name); err != nil {
			bad("ownership.static."+name, err)
			reported["ownership.static"] = true
		}
	}
	for _, kc := range checks {
		if reported[kc.key] || slices.ContainsFunc(kc.uses, func(k string) bool { return reported[k] }) {
			continue
		}
		pc := base
		kc.apply(&pc)
		if err := pc.Validate(); err != nil {
			_, inFile := c.lines[kc.key]
			_, fromEnv := c.env[kc.key]
			if kc.key == "slots.cycle" && !inFile && !fromEnv && c.Slots.Cycle == Duration(slots.CycleDefault) {
				// The cycle is the default nobody wrote: the resolution
				// is the key to name.
				bad("slots.resolution", fmt.Errorf("%s does not divide the default slots.cycle of %s: set slots.cycle to a multiple of it (such as %s), or 0s for a single position",
					time.Duration(c.Slots.Resolution), slots.CycleDefault, time.Duration(c.Slots.Resolution)*60))
				continue
			}
			bad(kc.key, engineError{err})
		}
	}
	if u := c.Database.URL; u != "" {
		// Only the form, as pgx reads it: parsing the value
		// (pgconn.ParseConfig) reads the TLS files it names, which a
		// command that does not connect, or one run where they are not,
		// must not need. The commands that connect parse it whole.
		scheme := urlScheme.FindStringSubmatch(u)
		switch {
		case scheme != nil && scheme[1] != "postgres" && scheme[1] != "postgresql":
			what := "is not a PostgreSQL URL"
			if l := strings.ToLower(scheme[1]); l == "postgres" || l == "postgresql" {
				what = "has its scheme in capitals, which pgx does not read: write " + l + "://"
			}
			bad("database.url", errors.New(what+" (postgres://user@host:5432/dbname, or key=value settings: host=... dbname=...); "+
				"SQLite takes a file in database.path instead"))
		case scheme == nil && !keyValueStart.MatchString(u):
			// Not settings: a URL behind spaces, or of another form
			// (jdbc:postgresql://…), which pgx would read as one odd
			// key=value setting (its query's "=").
			bad("database.url", errors.New("is not a PostgreSQL URL (postgres://user@host:5432/dbname, with no space before it) nor key=value settings "+
				"(host=... dbname=...); SQLite takes a file in database.path instead"))
		}
	}
	if c.Database.URL != "" && c.GroupSize > postgres.MaxGroupSize && !reported["group_size"] {
		bad("group_size", fmt.Errorf("%d exceeds PostgreSQL's %d checks per transaction: it caches %d subtransactions per "+
			"transaction, and beyond that other sessions look each one up in pg_subtrans while the transaction lasts",
			c.GroupSize, postgres.MaxGroupSize, postgres.MaxGroupSize))
	}
	if b := c.Database.BusyTimeout; b > busyTimeoutMax && !reported["database.busy_timeout"] {
		bad("database.busy_timeout", fmt.Errorf("must be at most %s, got %s", time.Duration(busyTimeoutMax), b))
	}
	if runtime, key := c.runtimeGuard(); c.Database.URL == "" && c.busyTimeoutSet() &&
		time.Duration(c.Database.BusyTimeout) <= runtime+time.Duration(c.GroupDuration) &&
		!reported["database.busy_timeout"] && !reported[key] && !reported["group_duration"] {
		hold := runtime + time.Duration(c.GroupDuration)
		bad("database.busy_timeout", fmt.Errorf("%s is not more than %s + group_duration, %s: a write waits this long for the "+
			"write lock, which a group of checks holds up to that long, and would fail behind a slow check "+
			"(write at least %s, or remove the key to have it follow the runtime guards)", c.Database.BusyTimeout, key, hold, hold+busyTimeoutMargin))
	}
	if c.Database.URL == "" {
		// The embedded store serves the processes of one host.
		if c.Database.Path == "" {
			bad("database.path", errors.New("is empty: name the SQLite file, or set database.url (or "+EnvDatabaseURL+") to use PostgreSQL"))
		}
		if c.Database.Schema != "" {
			bad("database.schema", errors.New("applies to PostgreSQL only; SQLite (used because database.url is empty) has no schemas: set database.url to use PostgreSQL, or leave database.schema out"))
		}
		if c.Database.MaxConns != 0 {
			bad("database.max_conns", errors.New("applies to PostgreSQL only; SQLite (used because database.url is empty) serialises writers itself: set database.url to use PostgreSQL, or leave database.max_conns out"))
		}
		if c.Ownership.Auto {
			bad("ownership.auto", errors.New("spreads slots over servers on several hosts, which must share PostgreSQL (set database.url); "+
				"SQLite serves the processes of one host: use one server, or ownership.static for several processes sharing the file"))
		}
	}
	if c.HTTP.Listen != "" {
		if err := checkListen(c.HTTP.Listen); err != nil {
			bad("http.listen", fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:9090 or :9090): %w", c.HTTP.Listen, err))
		}
	}
	c.validateAPI(bad)
	c.validateSinks(bad)
	errs = append(errs, c.checksErrors()...)
	if c.Database.MaxConns < 0 {
		bad("database.max_conns", fmt.Errorf("%d must be 0 (sized for the workers) or positive", c.Database.MaxConns))
	}
	if s := c.Database.Schema; s != "" && !schemaRE(s) {
		bad("database.schema", fmt.Errorf("%q is not a plain identifier (want lower-case letters, digits and '_', starting with a letter or '_')", s))
	}
	if _, err := c.logLevel(); err != nil {
		bad("log.level", err)
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad("log.format", fmt.Errorf("unknown format %q (want text or json)", f))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// A backstop for rules that span keys.
	if err := full.Validate(); err != nil {
		return &ConfigError{File: c.file, Err: redactErr(err, secrets, "")}
	}
	return nil
}

// secrets returns the values of c an error must not echo: database.url, and
// every other string (or map key) that may hold a password.
func (c *Config) secrets() []string {
	var out []string
	if c.Database.URL != "" {
		out = append(out, c.Database.URL)
	}
	var collect func(v reflect.Value)
	collect = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					collect(v.Field(i))
				}
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				collect(k)
			}
		case reflect.String:
			if s := v.String(); mayHoldCredentials(s) {
				out = append(out, s)
			}
		}
	}
	collect(reflect.ValueOf(*c))
	return out
}

// passwordRE finds the password in a value that may hold one: the userinfo
// of a URL after the user name, or a password= parameter.
var passwordRE = regexp.MustCompile(`(?i)://[^:@/\s]*:([^\s]*)@|(?:pass(?:word|wd)?|pwd)\s*=\s*([^\s&;]+)`)

// secretShortest is the shortest value redactErr replaces where it appears
// unquoted, unless it holds a URL's userinfo or a password= setting: a
// shorter value cannot be a connection string that carries a password, and
// replacing it wherever it appears replaced the message's own words (a
// database.url of " ", "a" or "postgres:" made "is<value not shown: ...>not
// <value not shown: ...>a ..." of the error saying it is not a URL).
const secretShortest = 12

// redactErr returns err with every secret it quotes replaced by notShown.
// When the error is about own, a value that may hold a password, and a piece
// of that password would still show (a parser quoting part of the value),
// the message quotes nothing at all. The result unwraps to err.
func redactErr(err error, secrets []string, own string) error {
	msg := err.Error()
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, strconv.Quote(s), notShown)
		if mayHoldCredentials(s) || len(strings.TrimSpace(s)) >= secretShortest {
			msg = strings.ReplaceAll(msg, s, notShown)
		}
	}
	for _, m := range passwordRE.FindAllStringSubmatch(own, -1) {
		if p := m[1] + m[2]; p != "" && strings.Contains(msg, p) {
			msg = "is not valid (" + notShown + ")"
		}
	}
	if msg == err.Error() {
		return err
	}
	return redactedError{msg, err}
}

// redactedError is an error whose message leaves out what may be a password.
type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

func schemaRE(s string) bool {
	for i, r := range s {
		switch {
		case r == '_' || (r >= 'a' && r <= 'z'):
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return len(s) > 0 && len(s) <= 63
}

func (c *Config) logLevel() (slog.Level, error) {
	switch strings.ToLower(c.Log.Level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown level %q (want debug, info, warn or error)", c.Log.Level)
}

// ClientConfig returns the engine configuration the file describes, with
// registry as its checks and logger as its logger (nil: slog.Default()). Call
// Validate first; ClientConfig does not check the values.
func (c *Config) ClientConfig(registry *checks.Registry, logger *slog.Logger) prescient.Config {
	pc := c.clientConfig()
	pc.Checks = registry
	pc.Logger = logger
	return pc
}

func (c *Config) clientConfig() prescient.Config {
	var own slots.Ownership
	if len(c.Ownership.Static) > 0 {
		own = make(slots.Ownership, len(c.Ownership.Static))
		for s, ps := range c.Ownership.Static {
			own[s] = append([]int(nil), ps...)
		}
	}
	pc := prescient.Config{
		Server: c.Server,
		Grid: slots.Grid{
			Resolution: time.Duration(c.Slots.Resolution),
			Offset:     time.Duration(c.Slots.Offset),
			Cycle:      time.Duration(c.Slots.Cycle),
		},
		Ownership:     own,
		AutoOwnership: c.Ownership.Auto,
		Heartbeat:     time.Duration(c.Ownership.Heartbeat),
		ServerTimeout: time.Duration(c.Ownership.ServerTimeout),
		Guards: guards.Limits{
			MaxChecks: c.Guards.MaxChecks,
			Runtime:   time.Duration(c.Guards.Runtime),
			Horizon:   time.Duration(c.Guards.Horizon),
		},
		MaxFailures:          c.Retry.MaxFailures,
		MaxUnfinished:        c.Retry.MaxUnfinished,
		RetryBackoffMax:      time.Duration(c.Retry.BackoffMax),
		Workers:              c.Workers,
		BatchSize:            c.BatchSize,
		GroupSize:            c.GroupSize,
		GroupDuration:        time.Duration(c.GroupDuration),
		SavepointEveryCheck:  c.SavepointEveryCheck,
		SweepMode:            prescient.SweepMode(c.Sweep.Mode),
		SweepSchedule:        c.Sweep.Schedule,
		SweepOnStartDisabled: !c.Sweep.OnStart,
		HistoryRetention:     time.Duration(c.History.Retention),
		PruneSchedule:        c.History.PruneSchedule,
		ShutdownGrace:        time.Duration(c.ShutdownGrace),
	}
	return pc.WithDefaults()
}

// busyTimeoutSet reports whether the file sets database.busy_timeout.
func (c *Config) busyTimeoutSet() bool { return c.lines["database.busy_timeout"] > 0 }

// busyTimeout is the SQLite busy timeout: database.busy_timeout when the
// file sets it, else derived from the longest runtime guard (see
// DatabaseConfig).
func (c *Config) busyTimeout() time.Duration {
	if c.busyTimeoutSet() {
		return time.Duration(c.Database.BusyTimeout)
	}
	runtime, _ := c.runtimeGuard()
	return max(time.Duration(c.Database.BusyTimeout), runtime+time.Duration(c.GroupDuration)+busyTimeoutMargin)
}

// runtimeGuard returns the longest runtime guard, the server's
// (guards.runtime), a declared check's own or a Go check's of the binary,
// and its key (or what it is): a group of checks holds SQLite's write lock
// for up to that long.
func (c *Config) runtimeGuard() (time.Duration, string) {
	runtime, key := time.Duration(c.Guards.Runtime), "guards.runtime"
	for _, name := range slices.Sorted(maps.Keys(c.Checks)) {
		if r := time.Duration(c.Checks[name].Guards.Runtime); r > runtime {
			runtime, key = r, "checks."+name+".guards.runtime"
		}
	}
	if c.goRuntime > runtime {
		runtime, key = c.goRuntime, "the runtime guard a Go check of this binary sets"
	}
	return runtime, key
}

// gridSet reports whether the file sets the slot grid (slots.resolution or
// slots.offset): then the commands round on it, and refuse a database whose
// servers recorded another; otherwise they use the recorded grid.
func (c *Config) gridSet() bool {
	return c.lines["slots.resolution"] > 0 || c.lines["slots.offset"] > 0
}

// Line returns the line of key path (e.g. "slots.resolution") in the file the
// configuration was read from, or 0 when the key was not in a file.
func (c *Config) Line(key string) int { return c.lines[key] }

// urlScheme matches the scheme of a value written as a URL (as pgx tells a
// URL from key=value settings: by its start).
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// keyValueStart matches the start of key=value settings: a keyword, then
// "=".
var keyValueStart = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

// engineError drops the engine's "config: " prefix, the key path says it
// better, and keeps the error chain (errors.Is(err, slots.ErrUnowned)).
type engineError struct{ err error }

func (e engineError) Error() string {
	s := strings.TrimPrefix(e.err.Error(), "config: ")
	for _, p := range []string{"server: ", "slots: ", "ownership: ", "guards: ", "sweep mode: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}
func (e engineError) Unwrap() error { return e.err }

// validServerName applies the rule of server names (the Validate method's
// own checks variable hides the package).
func validServerName(name string) error { return checks.ValidateName("server", name) }
