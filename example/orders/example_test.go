package orders_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/example/orders"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/slots"
)

// An order placed at noon and never shipped raises an alert three hours
// later and an escalation the next day. The clock is a variable here so that
// the example runs in a moment; a real server uses the wall clock and Start.
func Example() {
	ctx := context.Background()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	schema := "example_orders_" + hex.EncodeToString(rnd[:])
	store, err := postgres.Open(ctx, pgtest.URL(), &postgres.Opts{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	defer store.Pool().Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Pool().Exec(ctx, orders.Schema); err != nil {
		fmt.Println(err)
		return
	}

	opts := orders.Options{AlertAfter: 3 * time.Hour, EscalateAfter: 24 * time.Hour}
	reg := &checks.Registry{}
	if err := orders.Register(reg, opts); err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	client, err := prescient.NewClient(store, &prescient.Config{
		Grid:   slots.Grid{Resolution: 15 * time.Minute},
		Checks: reg,
		Now:    func() time.Time { return now },
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The order and its check commit in one transaction.
	err = pgx.BeginFunc(ctx, store.Pool(), func(tx pgx.Tx) error {
		job, err := orders.Place(ctx, client, tx, "42", now, opts)
		if err == nil {
			fmt.Println("order 42 placed, first check at", job.NextCheckAt.Format(time.DateTime))
		}
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	for _, slot := range []time.Time{now.Add(3 * time.Hour), now.Add(24 * time.Hour)} {
		now = slot
		rec, err := client.FireSlot(ctx, slot)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("slot %s: %d checked, %d rescheduled\n", slot.Format(time.DateTime), rec.Checked, rec.Rescheduled)
	}

	rows, _ := store.Pool().Query(ctx, "SELECT order_id, stage, raised_at FROM alerts ORDER BY raised_at")
	var id, stage string
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &stage, &at}, func() error {
		fmt.Printf("alert: order %s %s at %s\n", id, stage, at.Format(time.DateTime))
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// order 42 placed, first check at 2025-06-01 15:00:00
	// slot 2025-06-01 15:00:00: 1 checked, 1 rescheduled
	// slot 2025-06-02 12:00:00: 1 checked, 0 rescheduled
	// alert: order 42 alert at 2025-06-01 15:00:00
	// alert: order 42 escalation at 2025-06-02 12:00:00
}
