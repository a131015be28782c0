package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/metrics"
)

// readier is what the health endpoints ask: *prescient.Client.
type readier interface {
	// Ready returns nil when the server's last use of the database
	// succeeded, and the error that failed otherwise.
	Ready() error
}

// healthHandler serves /healthz (the process is alive) and /readyz (the
// server's last use of the database succeeded). A 503 from /readyz says only
// that the database is unreachable: whoever can reach the port need not
// learn the database's user, name or address, which a driver's error holds.
// The error goes to log instead, once each time it changes.
func healthHandler(client readier, log *slog.Logger) http.Handler {
	var (
		mu     sync.Mutex
		logged string // the error last logged, "" after a success
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		err := client.Ready()
		mu.Lock()
		if err == nil {
			logged = ""
		} else if msg := err.Error(); msg != logged {
			logged = msg
			log.Warn("readyz: not ready", "error", err)
		}
		mu.Unlock()
		if err != nil {
			why := "database unreachable"
			switch {
			case errors.Is(err, prescient.ErrNotMigrated) || errors.Is(err, errSchemaBehind):
				why = "the database's schema is not migrated"
			case errors.Is(err, errStarting) || errors.Is(err, prescient.ErrNotStarted):
				why = "starting"
			}
			http.Error(w, "not ready: "+why+" (details in the server's log)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// httpHandler is everything `run` serves on http.listen: GET /healthz and
// /readyz (healthHandler) and GET /metrics (the Prometheus exposition format,
// from gatherer). Mount further endpoints here; ready holds the client once
// it has started.
func (e *env) httpHandler(ready *startupReadier, gatherer prometheus.Gatherer, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	health := healthHandler(ready, log)
	mux.Handle("GET /healthz", health)
	mux.Handle("GET /readyz", health)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{
		// A collector that fails leaves its metrics out, not the scrape.
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promLogger{log},
	}))
	mountStatusPage(mux, ready, log)
	return mux
}

// metricsRegistry is the registry /metrics serves: the server's metrics
// (m), and the Go runtime's and the process's.
func metricsRegistry(m *metrics.Metrics) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// promLogger logs what promhttp reports (a metric that could not be
// gathered or written).
type promLogger struct{ log *slog.Logger }

func (l promLogger) Println(v ...any) {
	l.log.Warn("/metrics", "error", fmt.Sprint(v...))
}

// serveHTTP listens on addr and serves h until the returned function is
// called.
func serveHTTP(addr string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	// A port without a host is loopback only, as for api.listen: the page
	// and /metrics show jobs' keys, payloads and errors.
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
		log.Warn("http: serving the status page and /metrics beyond this host, without authentication: they show jobs' keys, payloads and errors "+
			"(listen on 127.0.0.1 and put an authenticating proxy in front to serve other hosts)", "addr", ln.Addr().String())
	}
	// A client that sends a body it announced and never ends it, or keeps
	// a connection idle, held a connection and a goroutine for ever.
	srv := limitedServer(h, log)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http", "error", err)
		}
	}()
	log.Info("serving http", "addr", ln.Addr().String(), "endpoints", []string{"/", "/healthz", "/readyz", "/metrics"})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
