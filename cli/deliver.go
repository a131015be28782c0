package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/delivery"
)

// Opening the delivery workers' store at start-up is retried like the
// engine's (see startServer), for as long as the server runs.
const (
	deliveryOpenRetryFirst = 250 * time.Millisecond
	deliveryOpenRetryMax   = 15 * time.Second
	// deliveryMaxConns caps the connections of the workers' own pool.
	deliveryMaxConns = 4
)

// sinkSecrets reads each webhook sink's secret from the environment
// variable its secret_env names. It reports, every one, a sink a check of
// this binary names that is not configured and a secret that is not set.
// It warns of white space dropped around a secret. run calls it first, to
// refuse a bad configuration before it serves anything.
func (e *env) sinkSecrets(cfg *Config, log *slog.Logger) (map[string][]byte, error) {
	errs := cfg.checkSinksErrors(e.opts.Checks)
	secrets := make(map[string][]byte)
	for _, name := range cfg.SinkNames() {
		s := cfg.Sinks[name]
		if s.Type != SinkWebhook {
			continue
		}
		// Without the whitespace around it, as the API token: a secret
		// read from a file (a Kubernetes secret) ends with a line break
		// the receiver's copy does not have, and every signature would
		// fail to verify.
		raw, _ := e.opts.lookupEnv(s.SecretEnv)
		v := strings.TrimSpace(raw)
		if v != raw && v != "" {
			// A receiver that verifies with the value as it was would
			// refuse every request: said once, at start-up.
			log.Warn("webhook secret: the white space around the value of "+s.SecretEnv+" is not part of the secret the requests are signed with",
				"sink", name, "dropped_bytes", len(raw)-len(v))
		}
		if v == "" {
			errs = append(errs, cfg.sinkError("sinks."+name+".secret_env", fmt.Errorf("%s is not set (or is empty, or only white space): it holds the secret "+
				"the sink signs its requests with; set it in the server's environment", s.SecretEnv)))
		}
		secrets[name] = []byte(v)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return secrets, nil
}

// startDelivery starts the delivery of events to the configured sinks for
// `run`, with the webhooks' secrets sinkSecrets read, and returns the
// function that stops it; call that after the client has stopped.
//
// It opens a store of its own
// (a small pool on PostgreSQL, so that the workers never take a connection
// the slots need), retrying until the database answers, and runs one
// worker per sink (package delivery). A slot that checked jobs wakes the
// workers at once, rather than at their next poll.
//
// The stop function stops claiming deliveries, gives the sends under way
// until shutdown_grace after the shutdown began (ctx's end), then cancels
// them (they are due again at once, for any server) and closes the store.
func (e *env) startDelivery(ctx context.Context, cfg *Config, secrets map[string][]byte, log *slog.Logger) (func(), error) {
	if len(cfg.Sinks) == 0 {
		return func() {}, nil
	}

	wake := &waker{}
	prev := e.observer
	if prev == nil {
		prev = prescient.NopObserver{}
	}
	e.observer = wakeOnSlot{Observer: prev, w: wake}

	// The grace runs from the start of the shutdown.
	var shutdownAt atomic.Int64
	go func() {
		<-ctx.Done()
		shutdownAt.Store(time.Now().UnixNano())
	}()

	openCtx, cancelOpen := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		d     *delivery.Deliverer
		store prescient.Store
	)
	opened := make(chan struct{})
	gate := e.deliveryGate
	go func() {
		defer close(opened)
		st, dl := e.openDelivery(openCtx, cfg, log, secrets)
		if dl == nil {
			return
		}
		if gate != nil {
			// Not before the server is built: on a database `run --migrate`
			// is migrating, the workers warned three times that it was not
			// migrated (found by a trial of a move to PostgreSQL).
			select {
			case <-gate:
			case <-openCtx.Done():
				st.Close()
				return
			}
		}
		mu.Lock()
		d, store = dl, st
		mu.Unlock()
		wake.d.Store(dl)
		dl.Start()
	}()
	return func() {
		cancelOpen()
		<-opened
		mu.Lock()
		defer mu.Unlock()
		if d == nil {
			return
		}
		began := time.Now()
		if ns := shutdownAt.Load(); ns != 0 {
			began = time.Unix(0, ns)
		}
		stopCtx, cancel := context.WithDeadline(context.Background(), began.Add(time.Duration(cfg.ShutdownGrace)))
		defer cancel()
		if err := d.Stop(stopCtx); err != nil {
			log.Warn("delivery: shutdown_grace ended with sends under way; they were cut short and are due again", "grace", time.Duration(cfg.ShutdownGrace))
		}
		store.Close()
	}, nil
}

// openDelivery opens the workers' store, retrying until ctx ends, and
// returns it with a Deliverer over it (not started), or nils when ctx ended
// first.
func (e *env) openDelivery(ctx context.Context, base *Config, log *slog.Logger, secrets map[string][]byte) (prescient.Store, *delivery.Deliverer) {
	cfg := *base
	if cfg.Database.MaxConns == 0 || cfg.Database.MaxConns > deliveryMaxConns {
		cfg.Database.MaxConns = deliveryMaxConns
	}
	wait := deliveryOpenRetryFirst
	for {
		st, err := openStore(ctx, &cfg, false, false)
		if err == nil {
			d, err := e.deliverer(ctx, &cfg, st, log, secrets)
			if err == nil {
				return st, d
			}
			st.Close()
			log.Error("delivery: cannot start the sinks' workers", "error", err)
			return nil, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		log.Warn("delivery: database unavailable; retrying", "error", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		wait = min(2*wait, deliveryOpenRetryMax)
	}
}

// deliverer builds the Deliverer of the configured sinks over st, and warns
// of deliveries waiting for sinks this configuration does not have.
func (e *env) deliverer(ctx context.Context, cfg *Config, st prescient.Store, log *slog.Logger, secrets map[string][]byte) (*delivery.Deliverer, error) {
	now := e.opts.Now
	if now == nil {
		now = time.Now
	}
	// As the engine's records do: with several servers, which one sent.
	log = log.With("server", cfg.clientConfig().Server)
	var targets []delivery.Target
	for _, name := range cfg.SinkNames() {
		s := cfg.Sinks[name]
		t := cfg.sinkOptions(name)
		switch s.Type {
		case SinkLog:
			t.Sink = &delivery.Log{Logger: log}
		case SinkWebhook:
			t.Sink = &delivery.Webhook{URL: s.URL, Secret: secrets[name], Now: now}
		case SinkPostgres:
			n, ok := st.Driver().(delivery.Notifier)
			if !ok {
				return nil, cfg.sinkError("sinks."+name+".type", errors.New("postgres applies to the PostgreSQL store only"))
			}
			t.Sink = &delivery.Notify{Notifier: n, Channel: s.channel()}
		}
		targets = append(targets, t)
	}
	d, err := delivery.New(st.Driver(), &delivery.Config{Server: cfg.clientConfig().Server, Targets: targets, Now: now, Logger: log})
	if err != nil {
		return nil, err
	}
	warnUnconfiguredSinks(ctx, cfg, st, log, now())
	return d, nil
}

// warnUnconfiguredSinks warns of deliveries waiting for sinks that cfg does
// not have, with or without sinks of its own: nothing else says why they
// never leave.
func warnUnconfiguredSinks(ctx context.Context, cfg *Config, st prescient.Store, log *slog.Logger, now time.Time) {
	counts, err := st.Driver().DeliveryCounts(ctx, now)
	if err != nil {
		return
	}
	for _, sink := range slices.Sorted(maps.Keys(counts)) {
		if _, ok := cfg.Sinks[sink]; !ok && counts[sink].Pending > 0 {
			log.Warn("delivery: deliveries wait for a sink this configuration does not have; they stay pending until a server configures it",
				"sink", sink, "pending", counts[sink].Pending)
		}
	}
}

// waker wakes the Deliverer once it exists.
type waker struct {
	d atomic.Pointer[delivery.Deliverer]
}

// wakeOnSlot is the engine's Observer with one more duty: a firing that
// checked jobs wakes the delivery workers, since its checks may have raised
// events. Waking never blocks the slot.
type wakeOnSlot struct {
	prescient.Observer
	w *waker
}

func (o wakeOnSlot) SlotFired(ev prescient.SlotEvent) {
	o.Observer.SlotFired(ev)
	if ev.Checked > 0 {
		if d := o.w.d.Load(); d != nil {
			d.Wake()
		}
	}
}
