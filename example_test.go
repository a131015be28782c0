package prescient_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
	"github.com/prescient-dev/prescient/sqlite"
)

// Two orders are placed, and a check of each is scheduled three hours later
// in the transaction that places it. One ships, which settles its check. When
// the slot comes (on an injected clock here; Start would wait for it), the
// other's check finds it still unshipped. Everything runs on an SQLite file:
// no server needed.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "prescient-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	store, err := sqlite.Open(ctx, filepath.Join(dir, "prescient.db"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	// The application's own table, in the same database.
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	registry := &checks.Registry{}
	err = registry.Register("order_unshipped", func(ctx context.Context, job *checks.Job) (time.Time, error) {
		var status string
		if err := job.Tx.QueryRow(ctx, `SELECT status FROM orders WHERE id = $1`, job.Key).Scan(&status); err != nil {
			return time.Time{}, err
		}
		if status == "unshipped" {
			fmt.Printf("order %s still unshipped in the %s slot\n", job.Key, job.Slot.Format("15:04"))
		}
		return time.Time{}, nil // done: no next check
	}, &checks.Opts{Awaits: []string{"shipped"}})
	if err != nil {
		fmt.Println(err)
		return
	}

	now := time.Date(2030, time.June, 1, 9, 0, 0, 0, time.UTC)
	client, err := prescient.NewTypedClient(store, &prescient.Config{
		Server: "example",
		Grid:   slots.Grid{Resolution: 15 * time.Minute},
		Checks: registry,
		Now:    func() time.Time { return now },
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// A started server records which checks await which events; this
	// client is never started, so it records them itself.
	if err := client.SyncCatalog(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// The application places two orders, each in a write transaction of
	// its own (store.WriteTx: BEGIN IMMEDIATE, which a server's groups let
	// go first). client.ScheduleTx takes the *sql.Tx: with a pgx.Tx it
	// would not compile.
	for _, id := range []string{"41", "42"} {
		var job *prescient.Job
		err := store.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES ($1, 'unshipped')`, id); err != nil {
				return err
			}
			var err error
			job, err = client.ScheduleTx(ctx, tx, prescient.ScheduleParams{
				Entity: "order", Key: id, Check: "order_unshipped", At: now.Add(3*time.Hour + 5*time.Minute),
			})
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("order %s placed, checked at %s\n", id, job.NextCheckAt.Format("15:04"))
	}

	// Order 41 ships: its pending check is settled in the same transaction.
	var n int
	err = store.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'shipped' WHERE id = '41'`); err != nil {
			return err
		}
		var err error
		n, err = client.ResolveTx(ctx, tx, "order", "41", "shipped")
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("checks settled by the shipment:", n)

	// The slot comes.
	now = time.Date(2030, time.June, 1, 12, 15, 0, 0, time.UTC)
	rec, err := client.FireSlot(ctx, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("checks run in the slot:", rec.Checked)
	recs, err := client.History(ctx, history.Filter{Entity: "order"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range recs {
		fmt.Printf("history: order %s %s\n", r.Key, r.Outcome)
	}
	// Output:
	// order 41 placed, checked at 12:15
	// order 42 placed, checked at 12:15
	// checks settled by the shipment: 1
	// order 42 still unshipped in the 12:15 slot
	// checks run in the slot: 1
	// history: order 42 done
	// history: order 41 resolved
}
