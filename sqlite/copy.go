package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// GridGet reads the grid from prescient_settings, or returns ErrNotFound.
func (s *Store) GridGet(ctx context.Context) (slots.Grid, error) {
	var resUS, offUS int64
	err := s.db.QueryRowContext(ctx, `SELECT resolution_us, offset_us FROM prescient_settings`).Scan(&resUS, &offUS)
	if err != nil {
		return slots.Grid{}, fmt.Errorf("get grid: %w", interpretError(err))
	}
	return slots.Grid{Resolution: duration(resUS), Offset: duration(offUS)}, nil
}

// CatalogList reads prescient_catalog, sorted by check name (byte order).
func (s *Store) CatalogList(ctx context.Context) ([]driver.CatalogEntry, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT check_name, awaits, entity FROM prescient_catalog ORDER BY check_name`)
	if err != nil {
		return nil, fmt.Errorf("list catalog: %w", interpretError(err))
	}
	defer rows.Close()
	var out []driver.CatalogEntry
	for rows.Next() {
		var (
			e      driver.CatalogEntry
			awaits string
		)
		if err := rows.Scan(&e.Check, &awaits, &e.Entity); err != nil {
			return nil, fmt.Errorf("list catalog: %w", interpretError(err))
		}
		if err := json.Unmarshal([]byte(awaits), &e.Awaits); err != nil {
			return nil, fmt.Errorf("list catalog: check %s: awaits %s: %w", e.Check, awaits, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list catalog: %w", interpretError(err))
	}
	return out, nil
}

// JobsExport pages through prescient_jobs on its primary key.
func (s *Store) JobsExport(ctx context.Context, afterID int64, limit int) ([]*driver.Job, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export jobs: limit %d must be positive", limit)
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT `+jobColumns+` FROM prescient_jobs WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("export jobs after id %d: %w", afterID, interpretError(err))
	}
	defer rows.Close()
	out := []*driver.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("export jobs after id %d: %w", afterID, interpretError(err))
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("export jobs after id %d: %w", afterID, interpretError(err))
	}
	return out, nil
}

// JobsImport checks jobs for collisions and inserts them one row at a time,
// in the caller's transaction or an IMMEDIATE one of its own.
func (s *Store) JobsImport(ctx context.Context, tx any, jobs []*driver.Job) error {
	if err := driver.CheckJobsImport(jobs); err != nil {
		return err
	}
	if len(jobs) == 0 {
		_, err := callerTx(tx)
		return err
	}
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var maxID int64
		for _, j := range jobs {
			var pending bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM prescient_jobs
				WHERE entity = $1 AND entity_key = $2 AND check_name = $3)`, j.Entity, j.Key, j.Check).Scan(&pending); err != nil {
				return err
			}
			if pending {
				return fmt.Errorf("job %s/%s/%s is already pending", j.Entity, j.Key, j.Check)
			}
			if err := idUnused(ctx, tx, j.ID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO prescient_jobs (id, entity, entity_key, check_name, first_check_at, next_check_at,
					last_check_at, check_count, failure_count, last_error, runtime_us, lateness_us,
					payload, created_at, updated_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
				j.ID, j.Entity, j.Key, j.Check, micros(j.FirstCheckAt), micros(j.NextCheckAt),
				nullMicros(j.LastCheckAt), j.CheckCount, j.FailureCount, nullString(j.LastError),
				durMicros(j.Runtime), durMicros(j.Lateness), nullText(j.Payload),
				micros(j.CreatedAt), micros(j.UpdatedAt)); err != nil {
				return fmt.Errorf("job %s/%s/%s: %w", j.Entity, j.Key, j.Check, err)
			}
			maxID = max(maxID, j.ID)
		}
		return advanceJobIDs(ctx, tx, maxID)
	})
	if err != nil {
		return fmt.Errorf("import %d job(s): %w", len(jobs), interpretError(err))
	}
	return nil
}

// idUnused fails when id is already taken by a pending job or a history
// record: both share the jobs' id sequence.
func idUnused(ctx context.Context, tx *sql.Tx, id int64) error {
	var table string
	err := tx.QueryRowContext(ctx, `
		SELECT 'pending job' FROM prescient_jobs WHERE id = $1
		UNION ALL
		SELECT 'history record' FROM prescient_history WHERE id = $1
		LIMIT 1`, id).Scan(&table)
	if err == nil {
		return fmt.Errorf("id %d is already used by a %s", id, table)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

// advanceJobIDs moves prescient_jobs' AUTOINCREMENT counter in
// sqlite_sequence past maxID, never back. SQLite moves it itself for an
// inserted job, but not for a history record, whose id the next job could
// otherwise take.
func advanceJobIDs(ctx context.Context, tx *sql.Tx, maxID int64) error {
	res, err := tx.ExecContext(ctx, `UPDATE sqlite_sequence SET seq = max(seq, $1) WHERE name = 'prescient_jobs'`, maxID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	// No job was ever inserted: the table has no counter row yet.
	_, err = tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq) VALUES ('prescient_jobs', $1)`, maxID)
	return err
}

// HistoryExport pages through prescient_history on its primary key.
func (s *Store) HistoryExport(ctx context.Context, afterID int64, limit int) ([]*history.Record, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export history: limit %d must be positive", limit)
	}
	rows, err := s.db.QueryContext(ctx, `
		SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
			check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at,
			finished_at, finished_by
		FROM prescient_history WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("export history after id %d: %w", afterID, interpretError(err))
	}
	defer rows.Close()
	out := []*history.Record{}
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("export history after id %d: %w", afterID, interpretError(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("export history after id %d: %w", afterID, interpretError(err))
	}
	return out, nil
}

// HistoryImport checks recs for collisions and inserts them one row at a
// time, in the caller's transaction or an IMMEDIATE one of its own.
func (s *Store) HistoryImport(ctx context.Context, tx any, recs []*history.Record) error {
	if err := history.CheckImport(recs); err != nil {
		return err
	}
	if len(recs) == 0 {
		_, err := callerTx(tx)
		return err
	}
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var maxID int64
		for _, r := range recs {
			if err := idUnused(ctx, tx, r.ID); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
					last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
					created_at, finished_at, finished_by)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`,
				r.ID, r.Entity, r.Key, r.Check, string(r.Outcome), micros(r.FirstCheckAt),
				nullMicros(r.LastCheckAt), r.CheckCount, r.FailureCount, durMicros(r.Runtime),
				durMicros(r.Lateness), nullString(r.LastError), nullText(r.Payload),
				micros(r.CreatedAt), micros(r.FinishedAt), r.FinishedBy); err != nil {
				return fmt.Errorf("history record %d: %w", r.ID, err)
			}
			maxID = max(maxID, r.ID)
		}
		return advanceJobIDs(ctx, tx, maxID)
	})
	if err != nil {
		return fmt.Errorf("import %d history record(s): %w", len(recs), interpretError(err))
	}
	return nil
}

// nullString returns nil for an empty string, so that it is stored as NULL.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// eventColumns are the columns scanEvent reads, of prescient_outbox.
const eventColumns = `id, idempotency_key, event, stage, severity, entity, entity_key, check_name, job_id, payload, created_at`

func scanEvent(row scanner) (*driver.OutboxEntry, error) {
	en := &driver.OutboxEntry{Deliveries: []*driver.Delivery{}}
	e := &en.Event
	var (
		payload sql.NullString
		created int64
	)
	if err := row.Scan(&e.ID, &e.IdempotencyKey, &e.Event, &e.Stage, &e.Severity, &e.Entity, &e.Key, &e.Check,
		&e.JobID, &payload, &created); err != nil {
		return nil, err
	}
	e.CreatedAt = fromMicros(created)
	if payload.Valid {
		e.Payload = json.RawMessage(payload.String)
	}
	return en, nil
}

// OutboxExport pages through prescient_outbox on its primary key, and
// reads the page's deliveries in a second statement.
func (s *Store) OutboxExport(ctx context.Context, afterID int64, limit int) ([]*driver.OutboxEntry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export events: limit %d must be positive", limit)
	}
	out, err := s.exportEvents(ctx, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("export events after id %d: %w", afterID, interpretError(err))
	}
	return out, nil
}

func (s *Store) exportEvents(ctx context.Context, afterID int64, limit int) ([]*driver.OutboxEntry, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM prescient_outbox WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, err
	}
	out := []*driver.OutboxEntry{}
	byID := make(map[int64]*driver.OutboxEntry)
	for rows.Next() {
		en, err := scanEvent(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, en)
		byID[en.Event.ID] = en
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(out) == 0 {
		return out, err
	}
	ds, err := s.deliveries(ctx, tx, `WHERE d.event_id BETWEEN $1 AND $2 ORDER BY d.event_id, d.sink`,
		out[0].Event.ID, out[len(out)-1].Event.ID)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		en := byID[d.Event.ID]
		d.Event = nil
		en.Deliveries = append(en.Deliveries, d)
	}
	return out, nil
}

// OutboxImport checks entries for collisions and inserts them one row at a
// time, in the caller's transaction or an IMMEDIATE one of its own.
func (s *Store) OutboxImport(ctx context.Context, tx any, entries []*driver.OutboxEntry) error {
	if err := driver.CheckOutboxImport(entries); err != nil {
		return err
	}
	if len(entries) == 0 {
		_, err := callerTx(tx)
		return err
	}
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		for _, en := range entries {
			e := &en.Event
			var taken string
			err := tx.QueryRowContext(ctx, `SELECT idempotency_key FROM prescient_outbox WHERE id = $1 OR idempotency_key = $2 LIMIT 1`,
				e.ID, e.IdempotencyKey).Scan(&taken)
			switch {
			case err == nil && taken == e.IdempotencyKey:
				return fmt.Errorf("event %s is already recorded", e.IdempotencyKey)
			case err == nil:
				return fmt.Errorf("event %s: id %d is already used by event %s", e.IdempotencyKey, e.ID, taken)
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO prescient_outbox (id, created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload, idempotency_key)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				e.ID, micros(e.CreatedAt), e.JobID, e.Entity, e.Key, e.Check, e.Stage, e.Event, e.Severity,
				nullText(e.Payload), e.IdempotencyKey); err != nil {
				return fmt.Errorf("event %s: %w", e.IdempotencyKey, err)
			}
			for _, d := range en.Deliveries {
				var status any
				if d.LastStatus != 0 {
					status = d.LastStatus
				}
				if _, err := tx.ExecContext(ctx, `
					INSERT INTO prescient_deliveries (event_id, sink, state, attempts, next_attempt_at, last_status,
						last_error, delivered_at, updated_at)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
					e.ID, d.Sink, string(d.State), d.Attempts, micros(d.NextAttemptAt), status,
					nullString(d.LastError), nullMicros(d.DeliveredAt), micros(d.UpdatedAt)); err != nil {
					return fmt.Errorf("event %s: delivery to sink %s: %w", e.IdempotencyKey, d.Sink, err)
				}
			}
		}
		// AUTOINCREMENT moves the outbox's counter past an inserted id
		// by itself.
		return nil
	})
	if err != nil {
		return fmt.Errorf("import %d event(s): %w", len(entries), interpretError(err))
	}
	return nil
}

// Copied says whether `prescient copy` copied this file to another store
// (see Freeze), and where and when: its jobs live there now.
func (s *Store) Copied(ctx context.Context) (target string, at time.Time, ok bool, err error) {
	var us int64
	err = s.db.QueryRowContext(ctx, `SELECT target, copied_at FROM prescient_copied`).Scan(&target, &us)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", time.Time{}, false, nil
	case err != nil:
		return "", time.Time{}, false, fmt.Errorf("read whether the file was copied: %w", err)
	}
	return target, time.UnixMicro(us).UTC(), true, nil
}

// copiedTriggers makes a file marked copied refuse every write of
// prescient's, from any program: the command line refused such a file
// (cli's openStore), but a Go program on it went on, a server started on it
// firing the jobs the copy's target fires too, and jobs scheduled into it
// never reaching the target (noted by the trial of a move to PostgreSQL).
// Every table prescient writes refuses a row while the mark is there. The
// first write of each path comes before a check runs or an event is sent
// (a firing records its slot in the ledger, then an attempt; a server
// saves the grid and registers before it fires; a delivery leases its
// event), so nothing runs on the file a second time. The triggers are made
// when the file is marked, not by a migration: SQLite's run per row, and
// each costs a lookup in the mark's table (FireSlot on SQLite about 5%
// slower, set-based deletes 20%), which no file that was never copied
// should pay. With the mark deleted (DELETE FROM prescient_copied) they
// stand idle, and the file takes writes again.
var copiedTriggers = func() string {
	var b strings.Builder
	for _, table := range []string{"jobs", "history", "slots", "settings", "catalog", "servers", "attempts", "outbox", "deliveries"} {
		for _, op := range []string{"INSERT", "UPDATE", "DELETE"} {
			fmt.Fprintf(&b, `CREATE TRIGGER IF NOT EXISTS prescient_copied_%[1]s_%[2]s BEFORE %[3]s ON prescient_%[1]s
WHEN EXISTS (SELECT 1 FROM prescient_copied)
BEGIN SELECT RAISE(ABORT, 'prescient: this file %[4]s (to use the file again anyway: DELETE FROM prescient_copied)'); END;
`, table, strings.ToLower(op), op, copiedRefusal)
		}
	}
	return b.String()
}()

// A Frozen file holds its write lock for a copy: every other writer, in
// this process or another, waits for it (and fails after its busy
// timeout), so that nothing written while the copy reads is lost, and the
// copy reads one state of the file.
type Frozen struct {
	tx *sql.Tx
}

// Freeze takes the file's write lock until the Frozen is released or
// marked copied. Reads on the Store's other connections go on (WAL).
func (s *Store) Freeze(ctx context.Context) (*Frozen, error) {
	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock, now
	if err != nil {
		return nil, fmt.Errorf("take the write lock of the file: %w", err)
	}
	return &Frozen{tx: tx}, nil
}

// MarkCopied records that the file was copied to target (its description,
// no password), makes it refuse prescient's writes (see ErrCopied), and
// releases the lock.
func (f *Frozen) MarkCopied(ctx context.Context, target string, at time.Time) error {
	if _, err := f.tx.ExecContext(ctx, `INSERT INTO prescient_copied (id, target, copied_at) VALUES (1, ?, ?)
		ON CONFLICT (id) DO UPDATE SET target = excluded.target, copied_at = excluded.copied_at`, target, at.UnixMicro()); err != nil {
		_ = f.tx.Rollback()
		return fmt.Errorf("mark the file copied: %w", err)
	}
	if _, err := f.tx.ExecContext(ctx, copiedTriggers); err != nil {
		_ = f.tx.Rollback()
		return fmt.Errorf("mark the file copied: make it refuse writes: %w", err)
	}
	if err := f.tx.Commit(); err != nil {
		return fmt.Errorf("mark the file copied: %w", err)
	}
	return nil
}

// Release releases the lock, recording nothing; after MarkCopied, a no-op.
func (f *Frozen) Release() { _ = f.tx.Rollback() }
