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

func noEnv(string) string { return "" }

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
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
retry: {max_failures: 3, backoff_max: 10m}
workers: 4
batch_size: 50
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
		Grid:                 slots.Grid{Resolution: 5 * time.Minute, Offset: time.Minute, Cycle: 20 * time.Minute},
		Ownership:            slots.Ownership{"web-1": {0, 1}, "web-2": {2, 3}},
		Heartbeat:            2 * time.Second,
		ServerTimeout:        10 * time.Second,
		Guards:               guards.Limits{MaxChecks: -1, Runtime: 10 * time.Second, Horizon: -1},
		MaxFailures:          3,
		RetryBackoffMax:      10 * time.Minute,
		Workers:              4,
		BatchSize:            50,
		SweepMode:            prescient.SweepReslot,
		SweepSchedule:        "@every 1m",
		SweepOnStartDisabled: true,
		HistoryRetention:     -1,
		PruneSchedule:        "-",
		ShutdownGrace:        time.Minute,
	}
	got.Now, got.Logger, got.Checks = nil, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClientConfig:\ngot  %+v\nwant %+v", got, want)
	}
	if cfg.Database != (DatabaseConfig{URL: "postgres://app@db:5432/app", Path: DatabasePathDefault, Schema: "jobs", MaxConns: 7}) {
		t.Errorf("database: got %+v", cfg.Database)
	}
	if cfg.Log != (LogConfig{Level: "debug", Format: "json"}) {
		t.Errorf("log: got %+v", cfg.Log)
	}
	if got, want := cfg.Line("slots.offset"), 9; got != want {
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
		{"duration as number", "shutdown_grace: 30\n", []string{":1: shutdown_grace:", `invalid duration "30"`}, nil},
		{"duration as list", "slots:\n  cycle: [1h]\n", []string{":2: slots.cycle:", "not a list"}, nil},
		{"bad integer", "\nworkers: many\n", []string{":2: workers:", `"many" is not a valid integer`}, nil},
		{"bad bool", "sweep:\n  on_start: maybe\n", []string{":2: sweep.on_start:", "boolean"}, nil},
		{"bad position", "ownership:\n  static:\n    a: [0, x]\n", []string{":3: ownership.static.a[1]:", "integer"}, nil},
		{"section not a mapping", "slots: 15m\n", []string{":1: slots:", "want a mapping of keys (resolution, offset, cycle)"}, nil},
		{"not a mapping", "- a\n- b\n", []string{"must be a mapping"}, nil},
		{"invalid YAML", "slots: [\n", []string{"not valid YAML"}, nil},
		{"unowned position", "slots: {resolution: 15m, cycle: 1h}\nownership:\n  static:\n    a: [0, 1]\n    b: [2]\n",
			[]string{":3: ownership.static:", "position(s) [3]", "never run"}, slots.ErrUnowned},
		{"position outside cycle", "ownership:\n  static:\n    a: [0, 1, 2, 3, 4]\n", []string{"ownership.static:", "position 4 is outside 0..3"}, nil},
		{"resolution not positive", "slots:\n  resolution: -1m\n", []string{":2: slots.resolution:", "must be positive"}, slots.ErrInvalidGrid},
		{"resolution zero", "slots:\n  resolution: 0s\n", []string{":2: slots.resolution: must be positive"}, nil},
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
		{"bad retention", "history:\n  retention: -5h\n", []string{":2: history.retention:", "-1 to keep forever"}, nil},
		{"zero workers", "workers: 0\n", []string{":1: workers: must be at least 1"}, nil},
		{"zero batch size", "batch_size: 0\n", []string{":1: batch_size: must be at least 1"}, nil},
		{"negative max_conns", "database: {max_conns: -1}\n", []string{":1: database.max_conns:"}, nil},
		{"bad schema", "database:\n  schema: 'My Schema'\n", []string{":2: database.schema:", "plain identifier"}, nil},
		{"bad log level", "log: {level: loud}\n", []string{":1: log.level:", `"loud"`}, nil},
		{"bad log format", "log:\n  format: xml\n", []string{":2: log.format:", `"xml"`, "text or json"}, nil},
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
		{"overrides win over the file", map[string]string{"HOST_ROLE": "web", EnvDatabaseURL: "postgres://env@db/app", EnvServer: "worker-9"}, path, "worker-9", "postgres://env@db/app", ""},
		{"overrides without a file", map[string]string{EnvDatabaseURL: "postgres://env@db/app", EnvServer: "solo"}, "", "solo", "postgres://env@db/app", ""},
		{"unset variable expands to empty", map[string]string{}, path, "-1", "postgres://file@db/app", ""},
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
