package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

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
	b, err := json.Marshal(positions)
	if err != nil {
		return fmt.Errorf("heartbeat of server %q: %w", srv.Name, err)
	}
	firing := make([]int64, 0, len(srv.Firing))
	for _, t := range srv.Firing {
		firing = append(firing, micros(t))
	}
	f, err := json.Marshal(firing)
	if err != nil {
		return fmt.Errorf("heartbeat of server %q: %w", srv.Name, err)
	}
	var checks any // NULL: not known
	if srv.Checks != nil {
		c, err := json.Marshal(srv.Checks)
		if err != nil {
			return fmt.Errorf("heartbeat of server %q: %w", srv.Name, err)
		}
		checks = string(c)
	}
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
			INSERT INTO prescient_servers (name, started_at, heartbeat_at, positions, firing, firing_at, timeout_us, checks, checks_at,
				ownership, ownership_at)
			VALUES ($1, $2, $3, $4, $5, $3, $6, $7, $3, nullif($8, ''), $3)
			ON CONFLICT (name) DO UPDATE SET started_at = excluded.started_at,
				heartbeat_at = excluded.heartbeat_at, positions = excluded.positions, firing = excluded.firing,
				firing_at = excluded.firing_at, timeout_us = excluded.timeout_us, checks = excluded.checks, checks_at = excluded.checks_at,
				ownership = excluded.ownership, ownership_at = excluded.ownership_at`,
			srv.Name, micros(srv.StartedAt), micros(srv.HeartbeatAt), string(b), string(f), nullDuration(srv.Timeout), checks, srv.Ownership)
		return err
	})
	if err != nil {
		return fmt.Errorf("heartbeat of server %q: %w", srv.Name, interpretError(err))
	}
	return nil
}

// ServerList returns the registered servers by name; Positions and Firing
// are never nil.
func (s *Store) ServerList(ctx context.Context) ([]*driver.Server, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT name, started_at, heartbeat_at, positions,
			-- What another heartbeat wrote (an older prescient's since) is stale.
			CASE WHEN firing_at = heartbeat_at THEN firing ELSE '[]' END,
			CASE WHEN firing_at = heartbeat_at THEN coalesce(timeout_us, 0) ELSE 0 END,
			CASE WHEN checks_at = heartbeat_at THEN checks END,
			CASE WHEN ownership_at = heartbeat_at THEN coalesce(ownership, '') ELSE '' END
		FROM prescient_servers ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list servers: %w", interpretError(err))
	}
	defer rows.Close()
	out := []*driver.Server{}
	for rows.Next() {
		var (
			srv           driver.Server
			started, beat int64
			positions     string
			firing        string
			timeout       int64
			checks        sql.NullString
		)
		if err := rows.Scan(&srv.Name, &started, &beat, &positions, &firing, &timeout, &checks, &srv.Ownership); err != nil {
			return nil, fmt.Errorf("list servers: %w", interpretError(err))
		}
		srv.StartedAt = fromMicros(started)
		srv.HeartbeatAt = fromMicros(beat)
		srv.Timeout = time.Duration(timeout) * time.Microsecond
		if checks.Valid {
			srv.Checks = []string{}
			if err := json.Unmarshal([]byte(checks.String), &srv.Checks); err != nil {
				return nil, fmt.Errorf("list servers: checks %q runs: %w", srv.Name, err)
			}
		}
		if err := json.Unmarshal([]byte(positions), &srv.Positions); err != nil {
			return nil, fmt.Errorf("list servers: positions of %q: %w", srv.Name, err)
		}
		if srv.Positions == nil {
			srv.Positions = []int{}
		}
		var us []int64
		if err := json.Unmarshal([]byte(firing), &us); err != nil {
			return nil, fmt.Errorf("list servers: slots %q is firing: %w", srv.Name, err)
		}
		srv.Firing = make([]time.Time, 0, len(us))
		for _, u := range us {
			srv.Firing = append(srv.Firing, fromMicros(u))
		}
		out = append(out, &srv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list servers: %w", interpretError(err))
	}
	return out, nil
}

// ServerDelete removes the server's row if there is one and that process
// (started at startedAt) wrote it.
func (s *Store) ServerDelete(ctx context.Context, name string, startedAt time.Time) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM prescient_servers WHERE name = $1 AND started_at = $2`, name, micros(startedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("delete server %q: %w", name, interpretError(err))
	}
	return nil
}

// nullDuration is d in microseconds, or NULL when d is zero (not known).
func nullDuration(d time.Duration) any {
	if d == 0 {
		return nil
	}
	return d.Microseconds()
}

// Clock returns the zero time: the database file has no clock of its own,
// and every process that opens it runs on one host's.
func (s *Store) Clock(context.Context) (time.Time, error) { return time.Time{}, nil }
