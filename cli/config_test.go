package cli

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/guards"
	"github.com/prescient-dev/prescient/slots"
)

// exampleFile is config.example.yaml at the repository root.
const exampleFile = "../config.example.yaml"

// public returns c without the bookkeeping of where it was read from.
func public(c *Config) Config {
	p := *c
	p.file, p.lines = "", nil
	return p
}

func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prescient.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExampleConfigIsTheDefault(t *testing.T) {
	got, err := loadConfig(exampleFile, noEnv)
	if err != nil {
		t.Fatalf("load %s: %v", exampleFile, err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("validate %s: %v", exampleFile, err)
	}
	if want := DefaultConfig(); !reflect.DeepEqual(public(got), public(want)) {
		t.Errorf("%s differs from DefaultConfig():\ngot  %+v\nwant %+v", exampleFile, public(got), public(want))
	}
	if empty, err := loadConfig("", noEnv); err != nil || !reflect.DeepEqual(public(empty), public(DefaultConfig())) {
		t.Errorf("no file: got %+v, %v; want DefaultConfig()", empty, err)
	}
}

// TestExampleConfigDocumentsEveryKey proves that config.example.yaml keeps
// up with Config: every key of the struct is present in the file.
func TestExampleConfigDocumentsEveryKey(t *testing.T) {
	raw, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	inFile := make(map[string]bool)
	var collect func(n *yaml.Node, path string)
	collect = func(n *yaml.Node, path string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kp := join(path, n.Content[i].Value)
			inFile[kp] = true
			collect(n.Content[i+1], kp)
		}
	}
	collect(doc.Content[0], "")
	var want []string
	var keys func(t reflect.Type, path string)
	keys = func(t reflect.Type, path string) {
		for _, name := range fieldNames(t) {
			f, _ := fieldByTag(t, name)
			want = append(want, join(path, name))
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				keys(f.Type, join(path, name))
			}
		}
	}
	keys(reflect.TypeOf(Config{}), "")
	if len(want) < 25 {
		t.Fatalf("found only %d keys in Config: %v", len(want), want)
	}
	for _, k := range want {
		if !inFile[k] {
			t.Errorf("key %s is not documented in %s", k, exampleFile)
		}
	}
}

func TestConfigValues(t *testing.T) {
	path := writeConfig(t, `
server: web-1
database:
  url: postgres://app@db:5432/app
  schema: jobs
  max_conns: 7
  busy_timeout: 2m
  startup_timeout: -1
slots:
  resolution: 5m
  offset: 1m
  cycle: 20m
ownership:
  static:
    web-1: [0, 1]
    web-2: [2, 3]
  heartbeat: 2s
  server_timeout: 10s
guards: {max_checks: -1, runtime: 10s, horizon: -1}
retry: {max_failures: 3, max_unfinished: 4, backoff_max: 10m}
workers: 4
batch_size: 50
group_size: 20
group_duration: 2s
savepoint_every_check: true
sweep: {mode: reslot, schedule: "@every 1m", on_start: false}
history: {retention: "-1", prune_schedule: "-"}
shutdown_grace: 1m
log: {level: debug, format: json}
`)
	cfg, err := loadConfig(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := cfg.ClientConfig(nil, nil)
	want := prescient.Config{
		Server:               "web-1",
		FinishedBy:           "api",
		Grid:                 slots.Grid{Resolution: 5 * time.Minute, Offset: time.Minute, Cycle: 20 * time.Minute},
		Ownership:            slots.Ownership{"web-1": {0, 1}, "web-2": {2, 3}},
		Heartbeat:            2 * time.Second,
		ServerTimeout:        10 * time.Second,
		Guards:               guards.Limits{MaxChecks: -1, Runtime: 10 * time.Second, Horizon: -1},
		MaxFailures:          3,
		MaxUnfinished:        4,
		RetryBackoffMax:      10 * time.Minute,
		Workers:              4,
		BatchSize:            50,
		GroupSize:            20,
		GroupDuration:        2 * time.Second,
		SavepointEveryCheck:  true,
		SweepMode:            prescient.SweepReslot,
		SweepSchedule:        "@every 1m",
		SweepOnStartDisabled: true,
		HistoryRetention:     -1,
		PruneSchedule:        "-",
		ShutdownGrace:        time.Minute,
		Observer:             prescient.NopObserver{},
	}
	got.Now, got.Logger, got.Checks = nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClientConfig:\ngot  %+v\nwant %+v", got, want)
	}
	if cfg.Database != (DatabaseConfig{URL: "postgres://app@db:5432/app", Path: DatabasePathDefault, Schema: "jobs", MaxConns: 7,
		BusyTimeout: Duration(2 * time.Minute), StartupTimeout: -1}) {
		t.Errorf("database: got %+v", cfg.Database)
	}
	if cfg.Log != (LogConfig{Level: "debug", Format: "json"}) {
		t.Errorf("log: got %+v", cfg.Log)
	}
	if got, want := cfg.Line("slots.offset"), 11; got != want {
		t.Errorf("Line(slots.offset) = %d, want %d", got, want)
	}
}

// TestConfigErrors covers decoding (LoadConfig) and validation (Validate):
// every error names the key path and, for a key in the file, its line.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		// want are substrings of the error.
		want []string
		is   error
	}{
		{"unknown top-level key", "workers: 3\nwokers: 4\n", []string{":2: wokers: unknown key", "workers"}, nil},
		{"unknown nested key", "slots:\n  resolution: 1m\n  resolutoin: 2m\n", []string{":3: slots.resolutoin: unknown key \"resolutoin\"", "under slots", "resolution, offset, cycle"}, nil},
		{"unknown key under log", "log:\n  colour: true\n", []string{":2: log.colour: unknown key"}, nil},
		{"bad duration", "guards:\n  runtime: 30x\n", []string{":2: guards.runtime:", `invalid duration "30x"`, "15m"}, nil},
		// Found by a trial of bad input: no word of days or of Go's end.
		{"duration in days", "guards:\n  horizon: 90d\n", []string{":2: guards.horizon:", `invalid duration "90d"`, "Go durations have no days or weeks, write 2160h"}, nil},
		{"duration in weeks", "history:\n  retention: 2 weeks\n", []string{":2: history.retention:", "write 336h"}, nil},
		{"duration past Go's", "history:\n  retention: 9999999999h\n", []string{":2: history.retention:", "too long, a duration ends at 2562047h"}, nil},
		{"duration as number", "shutdown_grace: 30\n", []string{":1: shutdown_grace:", `invalid duration "30"`}, nil},
		{"duration as list", "slots:\n  cycle: [1h]\n", []string{":2: slots.cycle:", "not a list"}, nil},
		{"bad integer", "\nworkers: many\n", []string{":2: workers:", `"many" is not a valid integer`}, nil},
		{"bad bool", "sweep:\n  on_start: maybe\n", []string{":2: sweep.on_start:", "boolean"}, nil},
		{"bad position", "ownership:\n  static:\n    a: [0, x]\n", []string{":3: ownership.static.a[1]:", "integer"}, nil},
		{"section not a mapping", "slots: 15m\n", []string{":1: slots:", "want a mapping of keys (resolution, offset, cycle)"}, nil},
		{"not a mapping", "- a\n- b\n", []string{"must be a mapping"}, nil},
		{"invalid YAML", "slots: [\n", []string{"not valid YAML"}, nil},
		// yaml.v3 gives no line for these (found by a trial of bad input).
		{"invalid YAML on the first line", "server: a: b\nworkers: 2\n", []string{":1: not valid YAML: mapping values are not allowed"}, nil},
		{"an alias to no anchor", "workers: 2\nbatch_size: *nope\n", []string{":2: not valid YAML: unknown anchor 'nope'"}, nil},
		{"a control character", "workers: 2\n\nserver: a\x01b\n", []string{":3: not valid YAML: control characters are not allowed"}, nil},
		{"not UTF-8", "workers: 2\nserver: a\xffb\n", []string{":2: not valid YAML: invalid leading UTF-8 octet"}, nil},
		// The parser names the line after the last, past the end of the file.
		{"a bracket not closed at the end", "workers: 2\nlog: {\n\n", []string{":2: not valid YAML: did not find expected node content (at the end of the file: a bracket"}, nil},
		{"a bracket not closed, no last line break", "workers: 2\nlog: [", []string{":2: not valid YAML", "at the end of the file"}, nil},
		// Not a bracket: its own line and hint (found by a review).
		{"a tab on a last line", "workers: 2\n\t\n", []string{":2: not valid YAML: found a tab character", "the line holds a tab"}, nil},
		{"a bracket not closed before a comment", "workers: 2\nlog: {\n# the end\n", []string{":2: not valid YAML", "at the end of the file"}, nil},
		// Found by a review: a longer alias or a comment naming the
		// missing one, and a NEL (which YAML allows) before the control
		// character, were taken for the line.
		{"an alias to no anchor after a longer one", "# uses *db\nworkers: &db_url 2\nbatch_size: *db_url\ngroup_size: *db\n", []string{":4: not valid YAML: unknown anchor 'db'"}, nil},
		{"a control character after a NEL", "workers: 2\nserver: \"a\u0085b\"\n\nlog: {level: \"a\x01\"}\n", []string{":4: not valid YAML: control characters are not allowed"}, nil},
		{"an integer with a leading zero and a 9", "batch_size: 09\n", []string{":1: batch_size: 09 starts with 0"}, nil},
		{"unowned position", "slots: {resolution: 15m, cycle: 1h}\nownership:\n  static:\n    a: [0, 1]\n    b: [2]\n",
			[]string{":3: ownership.static:", "position(s) [3]", "never run"}, slots.ErrUnowned},
		{"position outside cycle", "ownership:\n  static:\n    a: [0, 1, 2, 3, 4]\n", []string{"ownership.static:", "position 4 is outside 0..3"}, nil},
		{"server name no server can have", "ownership:\n  static:\n    \"web 1\": [0, 1]\n    web-2: [2, 3]\n",
			[]string{":3: ownership.static.web 1:", `invalid server name "web 1"`}, nil},
		{"resolution not positive", "slots:\n  resolution: -1m\n", []string{":2: slots.resolution:", "must be positive"}, slots.ErrInvalidGrid},
		{"resolution zero", "slots:\n  resolution: 0s\n", []string{":2: slots.resolution: must be positive"}, nil},
		{"database URL of another scheme", "database:\n  url: postgress://root@127.0.0.1:5432/shop\n",
			[]string{":2: database.url:", "is not a PostgreSQL URL (postgres://user@host:5432/dbname", "SQLite takes a file in database.path"}, nil},
		{"database URL that is a file name", "database:\n  url: shop.db\n",
			[]string{":2: database.url:", "is not a PostgreSQL URL", "SQLite takes a file in database.path"}, nil},
		{"resolution not dividing the default cycle", "slots:\n  resolution: 7m\n",
			[]string{":2: slots.resolution: 7m0s does not divide the default slots.cycle of 1h0m0s: set slots.cycle to a multiple of it (such as 7h0m0s), or 0s"}, nil},
		{"resolution not dividing a cycle written", "slots:\n  resolution: 7m\n  cycle: 1h\n", []string{":3: slots.cycle:", "not a multiple of the resolution 7m0s"}, slots.ErrInvalidGrid},
		{"offset too big", "slots:\n  resolution: 15m\n  offset: 20m\n", []string{":3: slots.offset:", "less than the resolution"}, slots.ErrInvalidGrid},
		{"cycle not a multiple", "slots:\n  cycle: 50m\n", []string{":2: slots.cycle:", "not a multiple"}, slots.ErrInvalidGrid},
		{"bad server name", "server: 'web 1'\n", []string{":1: server:", "invalid server name"}, nil},
		{"auto and static", "ownership:\n  static: {a: [0, 1, 2, 3]}\n  auto: true\n", []string{":3: ownership.auto:", "exclude each other"}, nil},
		{"timeout under two heartbeats", "ownership:\n  heartbeat: 10s\n  server_timeout: 15s\n", []string{":3: ownership.server_timeout:", "twice the heartbeat"}, nil},
		{"bad max_checks", "guards: {max_checks: -2}\n", []string{":1: guards.max_checks:", "-1 for no limit"}, nil},
		{"bad horizon", "guards:\n  horizon: -2h\n", []string{":2: guards.horizon:"}, nil},
		{"bad sweep mode", "sweep:\n  mode: later\n", []string{":2: sweep.mode:", `"later"`, `"reslot"`}, nil},
		{"bad sweep schedule", "sweep:\n  schedule: every day\n", []string{":2: sweep.schedule:", `"every day"`}, nil},
		{"bad prune schedule", "history:\n  prune_schedule: '99 * * * *'\n", []string{":2: history.prune_schedule:"}, nil},
		// Found by an operator's trial: cron ran these every second, or
		// never, and "" stood for the default.
		{"sweep every 0s", "sweep:\n  schedule: '@every 0s'\n", []string{":2: sweep.schedule:", "an @every must be at least 1s"}, nil},
		{"sweep every -5s", "sweep:\n  schedule: '@every -5s'\n", []string{":2: sweep.schedule:", "runs every -5s"}, nil},
		{"sweep every 100ms", "sweep:\n  schedule: '@every 100ms'\n", []string{":2: sweep.schedule:", "runs every 100ms"}, nil},
		{"prune on February 30th", "history:\n  prune_schedule: '0 0 30 2 *'\n", []string{":2: history.prune_schedule:", "never comes"}, nil},
		{"empty sweep schedule", "sweep:\n  schedule: \"\"\n", []string{":2: sweep.schedule: must be a cron spec", "or - for no scheduled sweep, got an empty value"}, nil},
		{"empty prune schedule", "history:\n  prune_schedule: ''\n", []string{":2: history.prune_schedule: must be a cron spec", "got an empty value"}, nil},
		{"empty sweep mode", "sweep:\n  mode: ''\n", []string{":2: sweep.mode: must be run or reslot, got an empty value"}, nil},
		{"bad retention", "history:\n  retention: -5h\n", []string{":2: history.retention:", "-1 to keep forever"}, nil},
		{"zero workers", "workers: 0\n", []string{":1: workers: must be at least 1"}, nil},
		{"negative workers", "workers: -3\n", []string{":1: workers: must be at least 1, got -3"}, nil},
		{"negative max_failures", "retry:\n  max_failures: -2\n", []string{":2: retry.max_failures: must be at least 1, got -2"}, nil},
		{"zero batch size", "batch_size: 0\n", []string{":1: batch_size: must be at least 1"}, nil},
		{"zero group size", "group_size: 0\n", []string{":1: group_size: must be at least 1"}, nil},
		// Found by a trial of bad input: a billion workers was accepted.
		{"a billion workers", "workers: 1000000000\n", []string{":1: workers: must be at most 10000", "got 1000000000"}, nil},
		{"a batch size past a page of due jobs", "batch_size: 10001\n", []string{":1: batch_size: must be at most 10000", "got 10001"}, nil},
		{"a group size past a page of due jobs", "group_size: 1000000\n", []string{":1: group_size: must be at most 10000", "got 1000000"}, nil},
		{"group size over PostgreSQL's cap", "database:\n  url: postgres://app@db/app\ngroup_size: 65\n", []string{":3: group_size: 65 exceeds PostgreSQL's 64"}, nil},
		{"zero group duration", "group_duration: 0s\n", []string{":1: group_duration: must be positive"}, nil},
		{"negative max_conns", "database: {max_conns: -1}\n", []string{":1: database.max_conns:"}, nil},
		{"bad schema", "database:\n  schema: 'My Schema'\n", []string{":2: database.schema:", "plain identifier"}, nil},
		{"bad log level", "log: {level: loud}\n", []string{":1: log.level:", `"loud"`}, nil},
		{"bad log format", "log:\n  format: xml\n", []string{":2: log.format:", `"xml"`, "text or json"}, nil},
		{"listen port out of range", "http:\n  listen: ':99999'\n", []string{":2: http.listen:", `port "99999": want a number from 0 to 65535`}, nil},
		// Found by a trial of bad input: YAML read 010 as 8 and dropped a
		// null server name from the map without a word.
		{"integer with a leading zero", "workers: 3\nbatch_size: 010\n", []string{":2: batch_size: 010 starts with 0", "octal"}, nil},
		{"null server name", "ownership:\n  static:\n    null: [0, 1, 2, 3]\n", []string{":3: ownership.static: a key is null (null)", `quotes if the name is "null"`}, nil},
		{"~ server name beside others", "ownership:\n  static:\n    web-1: [0, 1]\n    ~: [2, 3]\n", []string{":4: ownership.static: a key is null (~)"}, nil},
		{"a day of one-millisecond slots", "slots:\n  resolution: 1ms\n  cycle: 24h\n", []string{":3: slots.cycle:", "more than 100000 positions"}, slots.ErrInvalidGrid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := loadConfig(path, noEnv)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatalf("got no error for\n%s\nwant one containing %q", tt.body, tt.want)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path) {
				t.Errorf("error %q does not start with the file name %s", msg, path)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %T is not a *ConfigError", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", msg, tt.is)
			}
		})
	}
}

// TestConfigRefusesDefaultingValues: a value the engine would silently read
// as something else (0 as "the default", -1 as -1ns) is refused, with the key,
// its line and what to write instead, once.
func TestConfigRefusesDefaultingValues(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // the error, after the file name
	}{
		// A zero the engine would silently replace by its default is refused,
		// saying what to write instead.
		{"zero max_failures", "retry:\n  max_failures: 0\n", ":2: retry.max_failures: must be at least 1, got 0"},
		{"zero max_checks", "guards:\n  max_checks: 0\n", ":2: guards.max_checks: must be a positive number, or -1 for no limit, got 0"},
		{"zero runtime", "guards:\n  runtime: 0s\n", ":2: guards.runtime: must be positive (such as 30s; it cannot be disabled), got 0s"},
		{"zero horizon", "guards:\n  horizon: 0s\n", ":2: guards.horizon: must be positive (such as 2160h), or -1 for no limit, got 0s"},
		{"zero retention", "history:\n  retention: 0s\n", ":2: history.retention: must be positive (such as 720h), or -1 to keep forever, got 0s"},
		{"zero backoff_max", "retry:\n  backoff_max: 0s\n", ":2: retry.backoff_max: must be positive (such as 1h), got 0s"},
		{"zero heartbeat", "ownership:\n  heartbeat: 0s\n", ":2: ownership.heartbeat: must be positive (such as 5s), got 0s"},
		{"zero server_timeout", "ownership:\n  server_timeout: 0s\n", ":2: ownership.server_timeout: must be positive and more than twice ownership.heartbeat (such as 30s), got 0s"},
		{"zero shutdown_grace", "\nshutdown_grace: 0s\n", ":2: shutdown_grace: must be positive (such as 30s), got 0s"},
		// -1 where a key has no "no limit" is reported as -1, not -1ns.
		{"-1 runtime", "guards:\n  runtime: -1\n", ":2: guards.runtime: must be positive (such as 30s; it cannot be disabled), got -1"},
		{"-1 resolution", "slots:\n  resolution: -1\n", ":2: slots.resolution: must be positive (such as 15m), got -1"},
		{"-1 offset", "slots:\n  offset: -1\n", ":2: slots.offset: must be 0s, or positive and less than slots.resolution (such as 5m), got -1"},
		{"-1 cycle", "slots:\n  cycle: -1\n", ":2: slots.cycle: must be a multiple of slots.resolution (such as 1h), or 0s for a single position, got -1"},
		{"-1 heartbeat", "ownership:\n  heartbeat: -1\n", ":2: ownership.heartbeat: must be positive (such as 5s), got -1"},
		{"-1 server_timeout", "ownership:\n  server_timeout: -1\n", ":2: ownership.server_timeout: must be positive and more than twice ownership.heartbeat (such as 30s), got -1"},
		{"-1 backoff_max", "retry: {backoff_max: -1}\n", ":1: retry.backoff_max: must be positive (such as 1h), got -1"},
		{"-1 shutdown_grace", "shutdown_grace: -1\n", ":1: shutdown_grace: must be positive (such as 30s), got -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := loadConfig(path, noEnv)
			if err != nil {
				t.Fatalf("load\n%s: %v", tt.body, err)
			}
			err = cfg.Validate()
			if err == nil {
				t.Fatalf("validate\n%s: no error, want %q", tt.body, tt.want)
			}
			if got, want := err.Error(), path+tt.want; got != want {
				t.Errorf("validate\n%s:\n got %s\nwant %s", tt.body, got, want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key == "" || ce.Line == 0 {
				t.Errorf("error %#v is not a *ConfigError with a key and a line", err)
			}
		})
	}
	// The values that do mean something stay accepted.
	cfg, err := loadConfig(writeConfig(t, `
slots: {offset: 0s, cycle: 0s}
guards: {max_checks: -1, horizon: -1}
history: {retention: -1}
`), noEnv)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Errorf("0s offset and cycle, -1 max_checks, horizon and retention: %v", err)
	}
}

func TestConfigEnv(t *testing.T) {
	path := writeConfig(t, "server: ${HOST_ROLE}-1\ndatabase:\n  url: postgres://file@db/app\n  schema: $SCHEMA\n")
	tests := []struct {
		name       string
		env        map[string]string
		path       string
		wantServer string
		wantURL    string
		wantSchema string
	}{
		{"expanded, no overrides", map[string]string{"HOST_ROLE": "web", "SCHEMA": "jobs"}, path, "web-1", "postgres://file@db/app", "jobs"},
		{"set to empty", map[string]string{"HOST_ROLE": "", "SCHEMA": ""}, path, "-1", "postgres://file@db/app", ""},
		{"overrides win over the file", map[string]string{"HOST_ROLE": "web", "SCHEMA": "", EnvDatabaseURL: "postgres://env@db/app", EnvServer: "worker-9"}, path, "worker-9", "postgres://env@db/app", ""},
		{"overrides without a file", map[string]string{EnvDatabaseURL: "postgres://env@db/app", EnvServer: "solo"}, "", "solo", "postgres://env@db/app", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(tt.path, envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Server != tt.wantServer || cfg.Database.URL != tt.wantURL || cfg.Database.Schema != tt.wantSchema {
				t.Errorf("got server %q url %q schema %q; want %q %q %q",
					cfg.Server, cfg.Database.URL, cfg.Database.Schema, tt.wantServer, tt.wantURL, tt.wantSchema)
			}
		})
	}
}

// TestConfigEnvExpansion covers the syntax: ${NAME}, $NAME, $$ for a literal
// $, values inserted once (never expanded again), and comments left alone.
func TestConfigEnvExpansion(t *testing.T) {
	env := envOf(map[string]string{"DATABASE_URL": "postgres://app@db/app", "HOST": "web", "N": "4", "DOLLAR": "a$HOST", "EMPTY": ""})
	tests := []struct {
		name                string
		body                string
		wantURL, wantServer string
		wantWorkers         int
	}{
		{"braces", "database:\n  url: ${DATABASE_URL}\n", "postgres://app@db/app", "", 10},
		{"bare name", "server: $HOST-1\nworkers: $N\n", "", "web-1", 4},
		{"bare name ends at a non-name byte", "server: $HOST.x\n", "", "web.x", 10},
		{"in a flow mapping", "database: {url: ${DATABASE_URL}}\nserver: \"${HOST}\"\n", "postgres://app@db/app", "web", 10},
		{"$$ is a literal $", "database:\n  url: postgres://app:pa$$w0rd@db/app\n", "postgres://app:pa$w0rd@db/app", "", 10},
		{"$$ before a name", "server: $$HOST\n", "", "$HOST", 10},
		{"$$ then a reference", "server: $$$HOST\n", "", "$web", 10},
		{"a value is not expanded again", "server: ${DOLLAR}\n", "", "a$HOST", 10},
		{"set to empty", "server: x${EMPTY}y\n", "", "xy", 10},
		{"comments are not expanded", "# ${NOT_SET}, $ALSO_NOT_SET, a lone $ and ${\nworkers: 3 # costs 5$ a month, see ${NOPE}\n", "", "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, tt.body), env)
			if err != nil {
				t.Fatalf("load\n%s: %v", tt.body, err)
			}
			if cfg.Database.URL != tt.wantURL || cfg.Server != tt.wantServer || cfg.Workers != tt.wantWorkers {
				t.Errorf("load\n%s: got url %q server %q workers %d; want %q %q %d",
					tt.body, cfg.Database.URL, cfg.Server, cfg.Workers, tt.wantURL, tt.wantServer, tt.wantWorkers)
			}
		})
	}
}

// TestConfigEnvErrors: a variable that is not set is an error naming it and
// its line, never an empty value; so is a $ that starts no reference.
func TestConfigEnvErrors(t *testing.T) {
	env := envOf(map[string]string{"HOST": "web"})
	tests := []struct {
		name string
		body string
		// want are the errors, after the file name.
		want []string
	}{
		{"unset, braces", "server: $HOST\ndatabase:\n  url: ${DATABASE_URL}\n", []string{":3: ${DATABASE_URL} is not set"}},
		{"unset, bare", "workers: 3\nserver: $ROLE-1\n", []string{":2: $ROLE is not set"}},
		{"every unset variable", "server: ${A}\ndatabase:\n  schema: x${B}y$C\n", []string{":1: ${A} is not set", ":3: ${B} is not set", ":3: $C is not set"}},
		{"unset in a key", "ownership:\n  static:\n    ${SERVER}: [0, 1, 2, 3]\n", []string{":3: ${SERVER} is not set"}},
		{"a lone $", "database:\n  url: postgres://app:pa$-x@db/app\n", []string{":2: a $ that starts no variable: write $$ for a literal $"}},
		{"a $ before a digit", "server: a$1\n", []string{":1: a $ that starts no variable"}},
		{"$ at the end", "server: 'a$'\n", []string{":1: a $ that starts no variable"}},
		{"${ unclosed", "server: ${HOST\n", []string{":1: ${ has no closing }"}},
		{"${} empty", "server: ${}\n", []string{":1: ${} is not a variable reference"}},
		{"${ bad name }", "server: ${HOST-1}\n", []string{":1: ${HOST-1} is not a variable reference"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := loadConfig(path, env)
			if err == nil {
				t.Fatalf("load\n%s: no error, want %q", tt.body, tt.want)
			}
			msgs := strings.Split(err.Error(), "\n")
			if len(msgs) != len(tt.want) {
				t.Errorf("load\n%s: %d errors, want %d:\n%v", tt.body, len(msgs), len(tt.want), err)
			}
			for i, w := range tt.want {
				if i < len(msgs) && !strings.HasPrefix(msgs[i], path+w) {
					t.Errorf("error %d is %q, want it to start with %q", i, msgs[i], path+w)
				}
			}
			if strings.Contains(err.Error(), "pa$-x") {
				t.Errorf("error %q echoes the value, which may be a secret", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %T is not a *ConfigError", err)
			}
		})
	}
}

func TestPositionLabel(t *testing.T) {
	tests := []struct {
		grid slots.Grid
		want []string
	}{
		{slots.Grid{Resolution: 15 * time.Minute, Cycle: time.Hour}, []string{":00", ":15", ":30", ":45"}},
		{slots.Grid{Resolution: 15 * time.Minute, Offset: 5 * time.Minute, Cycle: time.Hour}, []string{":05", ":20", ":35", ":50"}},
		{slots.Grid{Resolution: 6 * time.Hour, Cycle: 24 * time.Hour}, []string{"00:00", "06:00", "12:00", "18:00"}},
		{slots.Grid{Resolution: 24 * time.Hour, Cycle: 7 * 24 * time.Hour}, []string{"Thu 00:00", "Fri 00:00", "Sat 00:00", "Sun 00:00", "Mon 00:00", "Tue 00:00", "Wed 00:00"}},
		{slots.Grid{Resolution: 20 * time.Second, Cycle: time.Minute}, []string{":00:00", ":00:20", ":00:40"}},
		{slots.Grid{Resolution: 2 * time.Second}, []string{":00:00"}},
		{slots.Grid{Resolution: 15 * time.Minute, Cycle: 45 * time.Minute}, []string{"+0s", "+15m0s", "+30m0s"}},
		{slots.Grid{Resolution: 500 * time.Millisecond, Cycle: time.Second}, []string{"+0s", "+500ms"}},
	}
	for _, tt := range tests {
		var got []string
		for p := range tt.grid.Positions() {
			got = append(got, positionLabel(tt.grid, p))
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("grid %s: labels %q, want %q", tt.grid, got, tt.want)
		}
	}
}

// TestConfigRefusesSecondDocument: yaml.v3 reads the first document of a
// file, so the keys after a "---" or "..." would be silently ignored (a
// database.url there, and prescient would open a new SQLite file). Such a
// file is an error at the marker's line.
func TestConfigRefusesSecondDocument(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // the error, after the file name
	}{
		{"---", "workers: 3\n---\ndatabase:\n  url: postgres://app@db/app\n",
			`:2: "---" starts a second YAML document, and prescient reads one: every key after this line would be ignored (remove the line, and keep all keys in one document)`},
		{"...", "workers: 3\n...\ndatabase:\n  url: postgres://app@db/app\n",
			`:2: "..." ends the YAML document, and prescient reads one: every key after this line would be ignored (remove the line, and keep all keys in one document)`},
		{"... then ---", "workers: 3\n...\n--- # next\nserver: b\n", `:2: "..." ends the YAML document`},
		{"after a leading ---", "# prescient\n---\nworkers: 3\n---\n\nserver: b\n", `:4: "---" starts a second YAML document`},
		{"an empty second document", "workers: 3\n---\n# nothing\n", `:2: "---" starts a second YAML document`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := loadConfig(path, noEnv)
			if err == nil {
				t.Fatalf("load\n%s: no error, want %q", tt.body, tt.want)
			}
			if !strings.HasPrefix(err.Error(), path+tt.want) {
				t.Errorf("load\n%s:\n got %s\nwant %s", tt.body, err, path+tt.want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Line == 0 {
				t.Errorf("error %#v is not a *ConfigError with a line", err)
			}
		})
	}
	// One document, with its markers, is a configuration file.
	for _, body := range []string{"---\nworkers: 3\n", "# prescient\n---\nworkers: 3\n...\n", "workers: 3\n...\n", "---\n# nothing yet\n"} {
		cfg, err := loadConfig(writeConfig(t, body), noEnv)
		if err != nil {
			t.Errorf("load\n%s: %v", body, err)
		} else if want := map[bool]int{true: 3, false: 10}[strings.Contains(body, "workers")]; cfg.Workers != want {
			t.Errorf("load\n%s: workers %d, want %d", body, cfg.Workers, want)
		}
	}
}

// TestConfigSyntaxErrorLine: a YAML syntax error names the line where the
// parser found it, or the line of the construct it is in (an unclosed "{"
// or "["): not the line before, as yaml.v3 says of its parser's problems.
func TestConfigSyntaxErrorLine(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{"workers: 3\nslots:\n\tresolution: 1m\n", ":3: not valid YAML: found character that cannot start any token (the line holds a tab: YAML indents with spaces only)"},
		{"workers: 3\nlog:\n  level: info\n - debug\n", ":4: not valid YAML: did not find expected key"},
		{"workers: 3\n server: a\n", ":2: not valid YAML: mapping values are not allowed in this context"},
		{"workers: 3\nsinks:\n  ops: {type: log\n  hook: {type: log}\n", ":3: not valid YAML: did not find expected ',' or '}'"},
		{"workers: 3\nsinks:\n  ops: {type: log}\nchecks:\n  c:\n    stages: [{after: 1h, event: e}\n    query: x\n", ":6: not valid YAML: did not find expected ',' or ']'"},
		{"log:\n  - debug\n  level: info\n", ":2: not valid YAML: did not find expected '-' indicator"},
	} {
		path := writeConfig(t, tt.body)
		_, err := loadConfig(path, noEnv)
		if err == nil || err.Error() != path+tt.want {
			t.Errorf("load\n%s:\n got %v\nwant %s", tt.body, err, path+tt.want)
		}
	}
}

// TestConfigRefusesBentValues: what the YAML decoder would bend into
// something else is refused, naming the key and its line: a fraction for an
// integer (1.9 became 1), and a null (it meant the default, silently).
func TestConfigRefusesBentValues(t *testing.T) {
	tests := []struct {
		name string
		body string
		want string // the error, after the file name
	}{
		{"fractional batch_size", "batch_size: 1.9\n", ":1: batch_size: must be a whole number, got 1.9"},
		{"fractional workers", "\nworkers: 2.5\n", ":2: workers: must be a whole number, got 2.5"},
		{"exponent", "guards:\n  max_checks: 1e3\n", ":2: guards.max_checks: must be a whole number, got 1e3"},
		{"fractional position", "ownership:\n  static:\n    a: [0, 1.5, 2, 3]\n", ":3: ownership.static.a[1]: must be a whole number, got 1.5"},
		{"quoted integer", "workers: '4'\n", `:1: workers: "4" is not a valid integer (write it without quotes)`},
		{"not a number", "retry:\n  max_failures: five\n", `:2: retry.max_failures: "five" is not a valid integer`},
		{"out of range", "database:\n  max_conns: 4294967296\n", `:2: database.max_conns: "4294967296" is not a valid integer`},
		{"null", "workers: null\n", ":1: workers: null is not a value (remove the key to get the default, 10)"},
		{"~", "batch_size: ~\n", ":1: batch_size: ~ is not a value (remove the key to get the default, 100)"},
		{"null duration", "guards:\n  runtime: null\n", ":2: guards.runtime: null is not a value (remove the key to get the default, 30s)"},
		{"null bool", "sweep:\n  on_start: Null\n", ":2: sweep.on_start: Null is not a value (remove the key to get the default, true)"},
		{"null string", "database:\n  url: ~\n", `:2: database.url: ~ is not a value (remove the key to get the default, "")`},
		{"null section", "slots: null\n", ":1: slots: null is not a value (remove the key to keep the defaults of its keys)"},
		{"null positions", "ownership:\n  static:\n    a: ~\n", ":3: ownership.static.a: ~ is not a value (write a list such as [0, 1], or remove the key)"},
		{"empty positions", "ownership:\n  static:\n    a:\n", ":3: ownership.static.a: has no value (write a list such as [0, 1], or remove the key)"},
		{"empty integer", "workers:\n", ":1: workers: has no value (write a whole number, or remove the key to get the default, 10)"},
		{"empty duration", "slots:\n  resolution:\n", ":2: slots.resolution: has no value (write a duration such as 15m, or remove the key to get the default, 15m0s)"},
		{"empty bool", "savepoint_every_check:\n", ":1: savepoint_every_check: has no value (write true or false, or remove the key to get the default, false)"},
		{"repeated key", "workers: 3\nbatch_size: 5\nworkers: 4\n", ":3: workers: is already set on line 1 (keep one)"},
		{"repeated server", "ownership:\n  static:\n    a: [0, 1]\n    a: [2, 3]\n", ":4: ownership.static.a: is already set on line 3 (keep one)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			_, err := loadConfig(path, noEnv)
			if err == nil {
				t.Fatalf("load\n%s: no error, want %q", tt.body, tt.want)
			}
			if got, want := err.Error(), path+tt.want; got != want {
				t.Errorf("load\n%s:\n got %s\nwant %s", tt.body, got, want)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key == "" || ce.Line == 0 {
				t.Errorf("error %#v is not a *ConfigError with a key and a line", err)
			}
		})
	}
	// An empty value is the empty string for a string, and no keys for a
	// section: what was written, not the default.
	cfg, err := loadConfig(writeConfig(t, "server:\ndatabase:\n  path:\n  schema: ''\nslots:\nownership:\n  static:\nworkers: 0x10\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "" || cfg.Database.Path != "" || cfg.Slots != DefaultConfig().Slots || cfg.Ownership.Static == nil || cfg.Workers != 16 {
		t.Errorf("got server %q, path %q, slots %+v, static %v, workers %d; want \"\", \"\", the defaults, {}, 16",
			cfg.Server, cfg.Database.Path, cfg.Slots, cfg.Ownership.Static, cfg.Workers)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "database.path: is empty") {
		t.Errorf("validate an empty database.path: got %v, want database.path: is empty", err)
	}
}

// TestConfigRefusesDurationsThatCannotWork: a duration below what its key
// can work with is refused, naming the key, its line and the minimum.
func TestConfigRefusesDurationsThatCannotWork(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []string // the errors, after the file name
	}{
		{"heartbeat and server timeout in milliseconds", "ownership:\n  heartbeat: 0.5ms\n  server_timeout: 2ms\n", []string{
			":2: ownership.heartbeat: must be at least 100ms (each heartbeat is a write to the database), got 500µs",
			":3: ownership.server_timeout: must be at least 1s (it must cover a late heartbeat and the clock difference between hosts), got 2ms",
		}},
		{"server timeout under a second", "ownership:\n  heartbeat: 100ms\n  server_timeout: 500ms\n", []string{
			":3: ownership.server_timeout: must be at least 1s (it must cover a late heartbeat and the clock difference between hosts), got 500ms",
		}},
		{"runtime under a round trip", "guards:\n  runtime: 0.5ms\n", []string{
			":2: guards.runtime: must be at least 10ms (a check runs in a database transaction, which takes longer to begin and commit), got 500µs",
		}},
		{"horizon in microseconds", "guards:\n  horizon: 1µs\n", []string{":2: guards.horizon: must be at least 1ms, got 1µs"}},
		{"offset in microseconds", "slots:\n  offset: 500us\n", []string{":2: slots.offset: must be 0s, or at least 1ms, got 500µs"}},
		{"group duration", "group_duration: 100µs\n", []string{":1: group_duration: must be at least 1ms, got 100µs"}},
		{"retention", "history:\n  retention: 1ns\n", []string{":2: history.retention: must be at least 1ms, got 1ns"}},
		{"backoff", "retry:\n  backoff_max: 999us\n", []string{":2: retry.backoff_max: must be at least 1ms, got 999µs"}},
		{"shutdown grace", "shutdown_grace: 1us\n", []string{":1: shutdown_grace: must be at least 1ms, got 1µs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := loadConfig(path, noEnv)
			if err != nil {
				t.Fatalf("load\n%s: %v", tt.body, err)
			}
			err = cfg.Validate()
			if err == nil {
				t.Fatalf("validate\n%s: no error, want %q", tt.body, tt.want)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, path+w)
			}
			if got := err.Error(); got != strings.Join(want, "\n") {
				t.Errorf("validate\n%s:\n got %s\nwant %s", tt.body, got, strings.Join(want, "\n"))
			}
		})
	}
	// The minimums themselves work.
	cfg, err := loadConfig(writeConfig(t, `
slots: {resolution: 1s, offset: 1ms}
ownership: {heartbeat: 100ms, server_timeout: 1s}
guards: {runtime: 10ms, horizon: 1s}
retry: {backoff_max: 1ms}
group_duration: 1ms
history: {retention: 1ms}
shutdown_grace: 1ms
`), noEnv)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		t.Errorf("the minimums: %v", err)
	}
}

// TestConfigErrorsHideCredentials: no error echoes what may be a password:
// database.url, or any value that looks like a URL with userinfo. A $ in a
// URL's password is not named as a variable; a URL under a key of another
// type is not quoted.
func TestConfigErrorsHideCredentials(t *testing.T) {
	const secret = "s3cr"
	tests := []struct {
		name string
		body string
		env  map[string]string
		want string // the first error, after the file name
	}{
		{"a $ in a URL's password", "database:\n  url: postgres://app:s3cr$et@db/app\n", nil,
			":2: database.url: a $ where the value may hold a password does not start a variable that is set (not shown): write $$ for a literal $, or ${NAME} for a variable"},
		{"a ${ in a URL's password", "database:\n  url: postgres://app:s3cr${e-t}@db/app\n", nil,
			":2: database.url: a $ where the value may hold a password"},
		{"a $ in a password parameter", "database:\n  url: postgres://db/app?password=s3cr$et\n", nil, ":2: database.url: a $ where the value may hold a password"},
		{"a $ in a key=value database.url", "database:\n  url: host=db password=s3cr$et\n", nil, ":2: database.url: a $ where the value may hold a password"},
		{"a $ in a URL under another key", "server: http://u:s3cr$et@h\n", nil, ":1: server: a $ where the value may hold a password"},
		{"URL as an integer", "workers: postgres://app:s3cret@db/app\n", nil, ":1: workers: <value not shown: it may hold a password> is not a valid integer"},
		{"URL as a duration", "guards:\n  runtime: postgres://app:s3cret@db/app\n", nil, ":2: guards.runtime: invalid duration <value not shown: it may hold a password>"},
		{"URL as a server name", "server: postgres://app:s3cret@db/app\n", nil, ":1: server: invalid server name <value not shown: it may hold a password>"},
		{"URL as a schedule", "sweep:\n  schedule: '* * * * postgres://app:s3cret@db'\n", nil, ":2: sweep.schedule: "},
		{"URL as an address", "http:\n  listen: postgres://app:s3cret@db:5432\n", nil, ":2: http.listen: <value not shown: it may hold a password> is not host:port"},
		{"URL as a log level", "log:\n  level: postgres://app:s3cret@db\n", nil, ":2: log.level: unknown level <value not shown: it may hold a password>"},
		{"URL as a schema", "database:\n  url: postgres://app:s3cret@db/app\n  schema: postgres://app:s3cret@db\n", nil, ":3: database.schema: <value not shown: it may hold a password> is not a plain identifier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.body)
			cfg, err := loadConfig(path, envOf(tt.env))
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				t.Fatalf("load\n%s: no error, want %q", tt.body, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the password", err)
			}
			if !strings.HasPrefix(err.Error(), path+tt.want) {
				t.Errorf("load\n%s:\n got %s\nwant %s...", tt.body, err, path+tt.want)
			}
		})
	}
	// A reference written on purpose is still named: one that is the whole
	// value, a ${NAME}, or one in the host or path of a URL.
	for _, tt := range []struct{ body, want string }{
		{"database:\n  url: $DATABASE_URL\n", ":2: $DATABASE_URL is not set"},
		{"database:\n  url: postgres://app:${DB_PASSWORD}@db/app\n", ":2: ${DB_PASSWORD} is not set"},
		{"database:\n  url: postgres://app:pw@$DB_HOST/app\n", ":2: $DB_HOST is not set"},
	} {
		path := writeConfig(t, tt.body)
		_, err := loadConfig(path, noEnv)
		if err == nil || !strings.HasPrefix(err.Error(), path+tt.want) {
			t.Errorf("load\n%s:\n got %v\nwant %s...", tt.body, err, path+tt.want)
		}
	}
}

// TestDatabasePathThatIsNoSQLiteFile: a directory, or a file of another
// kind, at database.path is refused at the key's line, saying what it is
// (found by a trial of bad input: "not writable by this process", and the
// driver's "file is not a database (26)", with no line).
func TestDatabasePathThatIsNoSQLiteFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	other := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(other, []byte("not a database, but long enough to have a header of a kind\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{dir, "is a directory, not a SQLite database file: name a file (such as " + filepath.Join(dir, "prescient.db") + ")"},
		{other, "not a SQLite database file: a file of another kind, or damaged"},
	} {
		for _, cmd := range [][]string{{"jobs", "list"}, {"schedule", "order", "1", "order_unshipped", "--in", "1h"}} {
			h := &harness{t: t, env: map[string]string{}}
			h.config = writeConfig(t, "workers: 2\ndatabase:\n  path: "+tt.path+"\n")
			_, err := h.run(cmd...)
			if err == nil || !strings.Contains(err.Error(), ":3: database.path: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("database.path %s, %q: %v, want an error at line 3 containing %q", tt.path, cmd, err, tt.want)
			}
		}
	}
}
