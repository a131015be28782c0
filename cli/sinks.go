package cli

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/delivery"
)

// The types of sink.
const (
	SinkLog      = "log"
	SinkWebhook  = "webhook"
	SinkPostgres = "postgres"
)

// Defaults of a sink's keys.
const (
	// SinkTimeoutDefault is the default timeout of one attempt.
	SinkTimeoutDefault = Duration(delivery.TimeoutDefault)
	// SinkMaxAttemptsDefault is the default max_attempts.
	SinkMaxAttemptsDefault = delivery.MaxAttemptsDefault
	// SinkBackoffInitialDefault and SinkBackoffMaxDefault are the default
	// delays between attempts.
	SinkBackoffInitialDefault = Duration(delivery.BackoffInitialDefault)
	SinkBackoffMaxDefault     = Duration(delivery.BackoffMaxDefault)
	// SinkChannelDefault is a postgres sink's default channel.
	SinkChannelDefault = "prescient_events"
)

// SinkConfig is one sink of the `sinks` section, under its name (the name
// checks give in their sinks). Keys left out take the defaults above;
// each type refuses the keys of the others.
type SinkConfig struct {
	// Type is log (a line in the server's log per event), webhook (a
	// signed POST of the event as JSON) or postgres (NOTIFY on a channel,
	// with the event's id; PostgreSQL store only).
	Type string `yaml:"type"`
	// URL is where a webhook POSTs: http:// or https://.
	URL string `yaml:"url"`
	// SecretEnv names the environment variable that holds a webhook's
	// signing secret; `run` refuses to start when it is not set.
	SecretEnv string `yaml:"secret_env"`
	// Timeout bounds one attempt (webhook, postgres).
	Timeout Duration `yaml:"timeout"`
	// MaxAttempts is how many attempts a delivery gets before it is dead
	// (webhook, postgres).
	MaxAttempts int `yaml:"max_attempts"`
	// BackoffInitial is the wait after the first failed attempt; each
	// failure doubles it, up to BackoffMax, then ±50% jitter (webhook,
	// postgres).
	BackoffInitial Duration `yaml:"backoff_initial"`
	BackoffMax     Duration `yaml:"backoff_max"`
	// Channel is a postgres sink's NOTIFY channel.
	Channel string `yaml:"channel"`
}

// SinkNames returns the names of the configured sinks, sorted. Checks
// (Go ones in checks.Opts.Sinks, declared ones in the checks section) may
// name these only.
func (c *Config) SinkNames() []string {
	names := make([]string, 0, len(c.Sinks))
	for n := range c.Sinks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// sinkKeys says which keys besides type each type of sink takes.
var sinkKeys = map[string][]string{
	SinkLog:      nil,
	SinkWebhook:  {"url", "secret_env", "timeout", "max_attempts", "backoff_initial", "backoff_max"},
	SinkPostgres: {"channel", "timeout", "max_attempts", "backoff_initial", "backoff_max"},
}

// channelRE is a channel LISTEN takes without quotes.
var channelRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// validateSinks reports the problems of the sinks section through bad. The
// secrets are checked by `run` only (see sinkTargets): the other commands
// deliver nothing, and run where the secret may not be set.
func (c *Config) validateSinks(bad func(key string, err error)) {
	for _, name := range c.SinkNames() {
		s := c.Sinks[name]
		base := "sinks." + name
		key := func(k string) string { return base + "." + k }
		set := func(k string) bool { return c.lines[key(k)] > 0 }
		if err := checks.ValidateName("sink", name); err != nil {
			bad(base, err)
			continue
		}
		allowed, ok := sinkKeys[s.Type]
		if !ok {
			if s.Type == "" {
				bad(base, errors.New("has no type: set type to log, webhook or postgres"))
			} else {
				bad(key("type"), fmt.Errorf("unknown type %s (want log, webhook or postgres)", quoteValue(s.Type)))
			}
			continue
		}
		for _, k := range []string{"url", "secret_env", "timeout", "max_attempts", "backoff_initial", "backoff_max", "channel"} {
			if set(k) && !slices.Contains(allowed, k) {
				bad(key(k), fmt.Errorf("does not apply to a %s sink (its keys: %s)", s.Type, strings.Join(append([]string{"type"}, allowed...), ", ")))
			}
		}
		switch s.Type {
		case SinkWebhook:
			if !set("url") || s.URL == "" {
				bad(base, errors.New("a webhook sink needs url: the http:// or https:// address to POST events to"))
			} else if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
				// The URL is not quoted: its path or query may hold a token.
				bad(key("url"), errors.New("is not an http:// or https:// URL with a host"))
			} else if p := u.Port(); p != "" {
				// Else every delivery fails to dial until it is dead.
				if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
					bad(key("url"), fmt.Errorf("has port %s: a port is 1 to 65535", quoteValue(p)))
				}
			}
			if !set("secret_env") || s.SecretEnv == "" {
				bad(base, errors.New("a webhook sink needs secret_env: the environment variable holding the secret its requests are signed with"))
			} else if envNameLen(s.SecretEnv) != len(s.SecretEnv) {
				bad(key("secret_env"), fmt.Errorf("%s is not an environment variable name (letters, digits and '_', not starting with a digit)", quoteValue(s.SecretEnv)))
			}
		case SinkPostgres:
			if c.Database.URL == "" {
				bad(key("type"), errors.New("postgres applies to the PostgreSQL store only: its consumers LISTEN and read prescient_outbox there; "+
					"set database.url (or "+EnvDatabaseURL+"), or use a webhook or log sink with SQLite"))
			}
			if set("channel") && !channelRE.MatchString(s.Channel) {
				bad(key("channel"), fmt.Errorf("%s is not a channel name LISTEN takes unquoted (lower-case letters, digits and '_', "+
					"starting with a letter or '_', at most 63)", quoteValue(s.Channel)))
			}
		}
		if set("timeout") && s.Timeout < durationMin {
			bad(key("timeout"), fmt.Errorf("must be at least %s (such as 10s), got %s", time.Duration(durationMin), s.Timeout))
		}
		if set("max_attempts") && s.MaxAttempts < 1 {
			bad(key("max_attempts"), fmt.Errorf("must be at least 1, got %d", s.MaxAttempts))
		}
		if set("backoff_initial") && s.BackoffInitial < durationMin {
			bad(key("backoff_initial"), fmt.Errorf("must be at least %s (such as 10s), got %s", time.Duration(durationMin), s.BackoffInitial))
		}
		if set("backoff_max") && s.BackoffMax < durationMin {
			bad(key("backoff_max"), fmt.Errorf("must be at least %s (such as 1h), got %s", time.Duration(durationMin), s.BackoffMax))
		} else if o := c.sinkOptions(name); o.Backoff.Max < o.Backoff.Initial && o.Backoff.Initial >= time.Duration(durationMin) {
			if set("backoff_max") {
				bad(key("backoff_max"), fmt.Errorf("%s is less than backoff_initial, %s", o.Backoff.Max, o.Backoff.Initial))
			} else {
				// The key written is the one to name.
				bad(key("backoff_initial"), fmt.Errorf("%s is more than backoff_max, %s (its default): set backoff_max to at least %s",
					o.Backoff.Initial, o.Backoff.Max, o.Backoff.Initial))
			}
		}
	}
}

// sinkOptions returns how the deliveries of sink name are tried: its keys,
// or their defaults where left out. The Sink itself is left to the caller.
func (c *Config) sinkOptions(name string) delivery.Target {
	s := c.Sinks[name]
	set := func(k string) bool { return c.lines["sinks."+name+"."+k] > 0 }
	t := delivery.Target{
		Name:        name,
		MaxAttempts: SinkMaxAttemptsDefault,
		Timeout:     time.Duration(SinkTimeoutDefault),
		Backoff:     delivery.Backoff{Initial: time.Duration(SinkBackoffInitialDefault), Max: time.Duration(SinkBackoffMaxDefault)},
	}
	if set("max_attempts") {
		t.MaxAttempts = s.MaxAttempts
	}
	if set("timeout") {
		t.Timeout = time.Duration(s.Timeout)
	}
	if set("backoff_initial") {
		t.Backoff.Initial = time.Duration(s.BackoffInitial)
	}
	if set("backoff_max") {
		t.Backoff.Max = time.Duration(s.BackoffMax)
	}
	return t
}

// channel is a postgres sink's channel.
func (s SinkConfig) channel() string {
	if s.Channel == "" {
		return SinkChannelDefault
	}
	return s.Channel
}

// sinkError is a *ConfigError about key of the sinks section, at its line.
func (c *Config) sinkError(key string, err error) error {
	return &ConfigError{File: c.file, Line: c.lines[key], Key: key, Err: err}
}

// checkSinksErrors reports every sink a check of reg names that is not
// configured.
func (c *Config) checkSinksErrors(reg *checks.Registry) []error {
	var errs []error
	for _, ch := range reg.All() {
		for _, s := range ch.Opts.Sinks {
			if _, ok := c.Sinks[s]; !ok {
				configured := strings.Join(c.SinkNames(), ", ")
				if configured == "" {
					configured = "none"
				}
				errs = append(errs, c.sinkError("sinks", fmt.Errorf("check %s delivers its events to sink %q, which is not configured "+
					"(configured: %s): add it to the sinks section", ch.Name, s, configured)))
			}
		}
	}
	return errs
}
