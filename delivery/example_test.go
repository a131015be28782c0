package delivery_test

import (
	"context"
	"log"
	"os"
	"path/filepath"

	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/sqlite"
)

// A program that runs prescient's client itself (not `prescient run`)
// starts a Deliverer beside it: the events its checks raise (job.Emit) are
// recorded in the outbox, and stay pending until a deliverer sends them to
// the sinks the checks name.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "prescient-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "prescient.db"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	d, err := delivery.New(store.Driver(), &delivery.Config{Server: "web-1", Targets: []delivery.Target{
		{Name: "ops", Sink: &delivery.Webhook{URL: "https://alerts.example.com/prescient", Secret: []byte(os.Getenv("PRESCIENT_WEBHOOK_SECRET"))}},
		{Name: "audit", Sink: &delivery.Log{}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	d.Start()
	defer d.Stop(ctx)
	// Start the client after this and defer its Stop: the Deliverer stops after it. Events the
	// last checks raised that it has not sent by then stay pending and go out at the next start
	// (d.DeliverDue(ctx, sink) sends a sink's due events at once).

	// Output:
}
