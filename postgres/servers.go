package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
)

// ServerHeartbeat upserts the server's row with every field of srv, and
// records that its Firing, Timeout and Checks were written with this
// heartbeat (firing_at, checks_at): ServerList reads them only then.
func (s *Store) ServerHeartbeat(ctx context.Context, srv *driver.Server) error {
	positions := srv.Positions
	if positions == nil {
		positions = []int{}
	}
	firing := srv.Firing
	if firing == nil {
		firing = []time.Time{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO prescient_servers (name, started_at, heartbeat_at, positions, firing, firing_at, timeout_us, checks, checks_at,
			ownership, ownership_at)
		VALUES ($1, $2, $3, $4, $5, $3, nullif($6::bigint, 0), $7, $3, nullif($8, ''), $3)
		ON CONFLICT (name) DO UPDATE SET started_at = excluded.started_at,
			heartbeat_at = excluded.heartbeat_at, positions = excluded.positions, firing = excluded.firing,
			firing_at = excluded.firing_at, timeout_us = excluded.timeout_us, checks = excluded.checks, checks_at = excluded.checks_at,
			ownership = excluded.ownership, ownership_at = excluded.ownership_at`,
		srv.Name, srv.StartedAt, srv.HeartbeatAt, positions, firing, srv.Timeout.Microseconds(), srv.Checks, srv.Ownership)
	if err != nil {
		return fmt.Errorf("heartbeat of server %q: %w", srv.Name, interpretError(ctx, err))
	}
	return nil
}

// ServerList returns the registered servers by name; Positions and Firing
// are never nil.
func (s *Store) ServerList(ctx context.Context) ([]*driver.Server, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT name, started_at, heartbeat_at, positions,
			-- What another heartbeat wrote (an older prescient's since) is stale.
			CASE WHEN firing_at = heartbeat_at THEN firing ELSE '{}' END,
			CASE WHEN firing_at = heartbeat_at THEN coalesce(timeout_us, 0) ELSE 0 END,
			CASE WHEN checks_at = heartbeat_at THEN checks END,
			CASE WHEN ownership_at = heartbeat_at THEN coalesce(ownership, '') ELSE '' END
		FROM prescient_servers ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.Server, error) {
		var (
			srv     driver.Server
			timeout int64
		)
		if err := row.Scan(&srv.Name, &srv.StartedAt, &srv.HeartbeatAt, &srv.Positions, &srv.Firing, &timeout, &srv.Checks, &srv.Ownership); err != nil {
			return nil, err
		}
		srv.Timeout = duration(timeout)
		srv.StartedAt = srv.StartedAt.UTC()
		srv.HeartbeatAt = srv.HeartbeatAt.UTC()
		if srv.Positions == nil {
			srv.Positions = []int{}
		}
		if srv.Firing == nil {
			srv.Firing = []time.Time{}
		}
		for i, t := range srv.Firing {
			srv.Firing[i] = t.UTC()
		}
		return &srv, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", interpretError(ctx, err))
	}
	return out, nil
}

// ServerDelete removes the server's row if there is one and that process
// (started at startedAt) wrote it.
func (s *Store) ServerDelete(ctx context.Context, name string, startedAt time.Time) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM prescient_servers WHERE name = $1 AND started_at = $2`, name, startedAt); err != nil {
		return fmt.Errorf("delete server %q: %w", name, interpretError(ctx, err))
	}
	return nil
}

// Clock reads the database server's clock (clock_timestamp(), not the
// transaction's start), plus the time the statement took: timed once the
// connection is had, so that a wait for one does not count.
func (s *Store) Clock(ctx context.Context) (time.Time, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", interpretError(ctx, err))
	}
	defer conn.Release()
	var t time.Time
	began := time.Now()
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", interpretError(ctx, err))
	}
	return t.Add(time.Since(began)).UTC(), nil
}
