package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/httpapi"
)

// APITokenEnvDefault is the default api.token_env.
const APITokenEnvDefault = "PRESCIENT_API_TOKEN"

// APIConfig is the `api` section: the JSON API `prescient run` serves
// (package httpapi) for applications that neither link the Go client nor
// reach the SQL functions.
type APIConfig struct {
	// Listen is the host:port the API is served on. Empty (the default)
	// serves no API. A port without a host (":8081") is served on loopback
	// only, 127.0.0.1, unlike http.listen: serving the API beyond this host
	// must be asked for by name (0.0.0.0:8081), and is logged as a warning.
	Listen string `yaml:"listen"`
	// TokenEnv names the environment variable holding the bearer token
	// every request must carry. With Listen set, `run` refuses to start when
	// the variable is unset or empty.
	TokenEnv string `yaml:"token_env"`
}

// HTTP server limits of every port run serves (see limitedServer): a slow
// or stalled client cannot hold a connection, or a goroutine, for long.
const (
	apiReadHeaderTimeout = 5 * time.Second
	apiReadTimeout       = 30 * time.Second
	// apiWriteTimeout leaves a request its store work (httpapi's timeout)
	// and the time to write its answer.
	apiWriteTimeout   = httpapi.TimeoutDefault + 10*time.Second
	apiIdleTimeout    = 2 * time.Minute
	apiMaxHeaderBytes = 64 << 10
	// apiStopWait is how long a stopping server waits for requests in
	// flight before closing their connections.
	apiStopWait = 5 * time.Second
	// apiTokenShort is the length under which a token is logged as weak.
	apiTokenShort = 16
)

// limitedServer is an HTTP server of h with the limits above, for every
// port run serves (api.listen, and http.listen, which is often open to
// Prometheus on other hosts, without authentication).
func limitedServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: apiReadHeaderTimeout,
		ReadTimeout:       apiReadTimeout,
		WriteTimeout:      apiWriteTimeout,
		IdleTimeout:       apiIdleTimeout,
		MaxHeaderBytes:    apiMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// validateAPI reports, through bad, what is wrong with the api section
// whatever the environment: a listen that is not host:port, a token_env
// that cannot name a variable, a listen that http.listen already uses.
func (c *Config) validateAPI(bad func(key string, err error)) {
	if name := c.API.TokenEnv; name == "" || envNameLen(name) != len(name) {
		bad("api.token_env", fmt.Errorf("%s is not an environment variable name (letters, digits and '_', not starting with a digit; default %s)",
			quoteValue(name), APITokenEnvDefault))
	}
	if c.API.Listen == "" {
		return
	}
	if err := checkListen(c.API.Listen); err != nil {
		bad("api.listen", fmt.Errorf("%q is not host:port (e.g. 127.0.0.1:8081, or :8081 for loopback only): %w", c.API.Listen, err))
		return
	}
	if c.API.Listen == c.HTTP.Listen {
		bad("api.listen", fmt.Errorf("%q is http.listen too: give the API a port of its own", c.API.Listen))
	}
}

// apiAddr is the address api.listen asks to listen on: a port without a
// host is loopback only.
func (c *Config) apiAddr() string {
	host, port, _ := net.SplitHostPort(c.API.Listen) // validated
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// apiError is a *ConfigError about key of the api section, at its line in
// the file, or at api.listen's when key is not in the file (a default).
func (c *Config) apiError(key string, err error) error {
	line := c.Line(key)
	if line == 0 {
		line = c.Line("api.listen")
	}
	return &ConfigError{File: c.file, Line: line, Key: key, Err: err}
}

// apiToken returns the bearer token of the API, read from the variable
// api.token_env names, or "" when api.listen is empty (no API). Without the
// token it returns a *ConfigError naming api.token_env and its line. run
// calls it before anything starts, so that a server missing its token
// refuses at once, without running a single check first.
func (e *env) apiToken(cfg *Config) (string, error) {
	if cfg.API.Listen == "" {
		return "", nil
	}
	name := cfg.API.TokenEnv
	// Surrounding white space is not part of the token: a secret file's
	// trailing newline would otherwise make a token no request can carry
	// (the handler trims what a request sends).
	if token, _ := e.opts.lookupEnv(name); strings.TrimSpace(token) != "" {
		return strings.TrimSpace(token), nil
	}
	return "", cfg.apiError("api.token_env", fmt.Errorf("the environment variable %s is not set or empty: api.listen serves the API, "+
		"and every request must carry the bearer token it holds (set %s to a long random secret, e.g. $(openssl rand -hex 32))", name, name))
}

// listenAPI listens on api.listen, or returns nil without it. run calls it
// before anything starts, so that an address it cannot listen on (a port
// taken) is refused at once, as a *ConfigError naming api.listen, without a
// slot fired first.
func (e *env) listenAPI(cfg *Config, log *slog.Logger) (net.Listener, error) {
	if cfg.API.Listen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.apiAddr())
	if err != nil {
		return nil, cfg.apiError("api.listen", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		log.Warn("api: serving beyond this host: anyone who can reach the address and holds the token can schedule, cancel and resolve jobs "+
			"(listen on 127.0.0.1 and put a TLS proxy in front to serve other hosts)", "addr", ln.Addr().String())
	}
	return ln, nil
}

// apiStarting is the answer to every API request that carries the token
// before the server has started (the database not reached yet): 503, so
// that callers fail at once and retry, rather than hang on a listener
// nobody serves.
const apiStarting = "prescient is starting: the database has not been reached yet; try again"

// serveAPI serves the JSON API on ln (from listenAPI), with token (from
// apiToken), until stop is called: 503 (apiStarting) until started is given
// the client, the API over it from then on. stop may be called more than
// once. With no listener it serves nothing and both functions do nothing.
func (e *env) serveAPI(ctx context.Context, cfg *Config, token string, ln net.Listener, log *slog.Logger) (started func(*prescient.Client), stop func()) {
	if ln == nil {
		return func(*prescient.Client) {}, func() {}
	}
	name := cfg.API.TokenEnv
	if len(token) < apiTokenShort {
		log.Warn(fmt.Sprintf("api: the bearer token is shorter than %d characters: use a long random secret (openssl rand -hex 32)", apiTokenShort),
			"token_env", name, "length", len(token))
	}
	var api atomic.Pointer[http.Handler]
	starting := httpapi.Unavailable(&httpapi.Opts{Token: token}, apiStarting)
	srv := limitedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := api.Load(); h != nil {
			(*h).ServeHTTP(w, r)
			return
		}
		starting.ServeHTTP(w, r)
	}), log)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("api", "error", err)
		}
	}()
	started = func(client *prescient.Client) {
		if client == nil { // its start failed: starting again
			api.Store(nil)
			return
		}
		var h http.Handler = httpapi.New(client, &httpapi.Opts{Token: token, Logger: log})
		api.Store(&h)
		log.Info("serving api", "addr", ln.Addr().String(), "token_env", name,
			"endpoints", []string{"POST /v1/schedule", "POST /v1/cancel", "POST /v1/resolve", "GET /v1/jobs/{entity}/{key}", "GET /v1/history"})
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiStopWait)
			defer cancel()
			if err := srv.Shutdown(stopCtx); err != nil {
				log.Warn("api: requests still running when it stopped; their connections were closed", "error", err)
				_ = srv.Close()
			}
			<-served
		})
	}
	return started, stop
}
