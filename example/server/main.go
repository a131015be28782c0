// Command server is a complete prescient application in one file: it runs the
// engine with the order example's check against PostgreSQL, and places an
// order the way a web handler would, scheduling its check in the same
// transaction as the order row.
//
//	PRESCIENT_DATABASE_URL=postgres://root@127.0.0.1:5432/postgres?sslmode=disable go run ./example/server
//
// It uses a 5-second slot grid so that the alert (after 10s) and the
// escalation (after 20s) show within half a minute; press Ctrl-C to stop.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	// 1. The store: prescient's tables live beside the application's.
	store, err := postgres.Open(ctx, os.Getenv("PRESCIENT_DATABASE_URL"), &postgres.Opts{Schema: "prescient_example"})
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := store.Pool().Exec(ctx, orders.Schema); err != nil {
		return err
	}

	// 2. The checks this server runs.
	opts := orders.Options{AlertAfter: 10 * time.Second, EscalateAfter: 20 * time.Second, Logger: slog.Default()}
	registry := &checks.Registry{}
	if err := orders.Register(registry, opts); err != nil {
		return err
	}

	// 3. The engine: fire every slot of a 5-second grid until stopped.
	client, err := prescient.NewClient(store, &prescient.Config{
		Server: "example",
		Grid:   slots.Grid{Resolution: 5 * time.Second},
		Checks: registry,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.WithoutCancel(ctx))

	// 4. The application: an order and its check commit together.
	id := fmt.Sprintf("ex-%d", time.Now().Unix())
	err = pgx.BeginFunc(ctx, store.Pool(), func(tx pgx.Tx) error {
		job, err := orders.Place(ctx, client, tx, id, time.Now(), opts)
		if err == nil {
			slog.Info("placed order", "order", id, "first_check", job.NextCheckAt)
		}
		return err
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}
