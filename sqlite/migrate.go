package sqlite

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/prescient-dev/prescient/migrations"
)

// migrationsTable is goose's version table.
const migrationsTable = "prescient_migrations"

// Migrate applies the pending migrations of migrations.SQLite with goose. It
// is safe to run repeatedly and from several processes at once: concurrent
// runs serialise on a lease held in the table prescient_migrate_lock (polled
// every 50ms for up to ten minutes), and each migration runs in an IMMEDIATE
// transaction.
func (s *Store) Migrate(ctx context.Context) error {
	fsys, err := fs.Sub(migrations.SQLite, "sqlite")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectSQLite3, s.db, fsys,
		goose.WithLocker(newMigrateLocker(s)),
		goose.WithTableName(migrationsTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		if werr := writable(s.path); werr != nil { // "attempt to write a readonly database" says neither what nor why
			return fmt.Errorf("migrate %s: %w", s.path, werr)
		}
		return fmt.Errorf("migrate: %w", interpretError(err))
	}
	// A file marked copied by a prescient that made no triggers refuses
	// writes from here on, as one marked now does.
	if _, _, copied, err := s.Copied(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	} else if copied {
		if _, err := s.db.ExecContext(ctx, copiedTriggers); err != nil {
			return fmt.Errorf("migrate: make the file marked copied refuse writes: %w", interpretError(err))
		}
	}
	return nil
}

// Migration lock timings. The lease outlives a heartbeat gap by far, and a
// process that died holding it delays others by at most migrateLease.
const (
	migrateLease = 30 * time.Second
	migrateBeat  = 5 * time.Second
	migratePoll  = 50 * time.Millisecond
	migrateWait  = 10 * time.Minute
)

// migrateLocker is a goose lock.Locker for SQLite, which has no advisory
// locks and whose transaction locks cannot span goose's separate migration
// transactions: it holds a lease row in prescient_migrate_lock, renewed by a
// heartbeat while the migrations run and deleted by Unlock. A lease whose
// holder died expires after migrateLease.
type migrateLocker struct {
	s     *Store
	owner string

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

var _ lock.Locker = (*migrateLocker)(nil)

func newMigrateLocker(s *Store) *migrateLocker {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return &migrateLocker{s: s, owner: hex.EncodeToString(b)}
}

// Lock polls for the lease until it holds it, ctx ends or migrateWait passes.
func (l *migrateLocker) Lock(ctx context.Context, _ *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, migrateWait)
	defer cancel()
	for {
		ok, err := l.try(ctx)
		if err != nil {
			return fmt.Errorf("take migration lock: %w", interpretError(err))
		}
		if ok {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("take migration lock: another process holds it: %w", ctx.Err())
		case <-time.After(migratePoll):
		}
	}
	beat, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	l.mu.Lock()
	l.stop, l.done = stop, done
	l.mu.Unlock()
	go l.heartbeat(beat, done)
	return nil
}

// try takes the lease if it is free or expired, in one IMMEDIATE transaction.
func (l *migrateLocker) try(ctx context.Context) (bool, error) {
	var got bool
	err := l.s.inTx(ctx, nil, func(tx *sql.Tx) error {
		now := micros(time.Now())
		if _, err := tx.ExecContext(ctx, `
			CREATE TABLE IF NOT EXISTS prescient_migrate_lock (
				id         INTEGER PRIMARY KEY CHECK (id = 1),
				owner      TEXT    NOT NULL,
				expires_at INTEGER NOT NULL
			) STRICT`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM prescient_migrate_lock WHERE expires_at < $1`, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO prescient_migrate_lock (id, owner, expires_at) VALUES (1, $1, $2)`,
			l.owner, now+durMicros(migrateLease))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		got = n == 1
		return err
	})
	return got, err
}

// heartbeat renews the lease until stopped.
func (l *migrateLocker) heartbeat(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(migrateBeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// A failed renewal is retried at the next beat; the lease has room.
		_ = l.s.inTx(ctx, nil, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE prescient_migrate_lock SET expires_at = $2 WHERE owner = $1`,
				l.owner, micros(time.Now())+durMicros(migrateLease))
			return err
		})
	}
}

// Unlock stops the heartbeat and gives the lease up.
func (l *migrateLocker) Unlock(ctx context.Context, _ *sql.DB) error {
	l.mu.Lock()
	stop, done := l.stop, l.done
	l.stop, l.done = nil, nil
	l.mu.Unlock()
	if stop == nil {
		return errors.New("release migration lock: not held")
	}
	stop()
	<-done
	err := l.s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM prescient_migrate_lock WHERE owner = $1`, l.owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("release migration lock: %w", interpretError(err))
	}
	return nil
}

// SchemaVersion returns the version the database's schema is at (0 before
// any migration) and the last version this binary's migrations bring it
// to. It reads goose's table and changes nothing.
func (s *Store) SchemaVersion(ctx context.Context) (current, latest int64, err error) {
	if latest, err = migrations.Latest(migrations.SQLite, "sqlite"); err != nil {
		return 0, 0, err
	}
	var exists bool
	if err := s.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1)`,
		migrationsTable).Scan(&exists); err != nil {
		return 0, 0, fmt.Errorf("read the schema's version: %w", interpretError(err))
	}
	if !exists {
		return 0, latest, nil
	}
	var v sql.NullInt64
	if err := s.db.QueryRowContext(ctx, `SELECT max(version_id) FROM `+migrationsTable).Scan(&v); err != nil {
		return 0, 0, fmt.Errorf("read the schema's version: %w", interpretError(err))
	}
	return v.Int64, latest, nil
}
