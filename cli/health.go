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
			http.Error(w, "not ready: database unreachable (details in the server's log)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// serveHealth listens on addr and serves the health endpoints until the
// returned function is called.
func serveHealth(addr string, client readier, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	srv := &http.Server{Handler: healthHandler(client, log), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("health endpoints", "error", err)
		}
	}()
	log.Info("serving health endpoints", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
