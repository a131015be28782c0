package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// GridGet reads the grid from prescient_settings, or returns ErrNotFound.
func (s *Store) GridGet(ctx context.Context) (slots.Grid, error) {
	var resUS, offUS int64
	err := s.pool.QueryRow(ctx, `SELECT resolution_us, offset_us FROM prescient_settings`).Scan(&resUS, &offUS)
	if err != nil {
		return slots.Grid{}, fmt.Errorf("get grid: %w", interpretError(ctx, err))
	}
	return slots.Grid{Resolution: duration(resUS), Offset: duration(offUS)}, nil
}

// CatalogList reads prescient_catalog, sorted by check name (byte order).
func (s *Store) CatalogList(ctx context.Context) ([]driver.CatalogEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT check_name, awaits FROM prescient_catalog ORDER BY check_name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list catalog: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.CatalogEntry, error) {
		var e driver.CatalogEntry
		err := row.Scan(&e.Check, &e.Awaits)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list catalog: %w", interpretError(ctx, err))
	}
	return out, nil
}

// JobsExport pages through prescient_jobs on its primary key.
func (s *Store) JobsExport(ctx context.Context, afterID int64, limit int) ([]*driver.Job, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export jobs: limit %d must be positive", limit)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+jobColumns+` FROM prescient_jobs j WHERE j.id > $1 ORDER BY j.id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("export jobs after id %d: %w", afterID, interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, fmt.Errorf("export jobs after id %d: %w", afterID, interpretError(ctx, err))
	}
	return out, nil
}

// JobsImport checks jobs for collisions and inserts them with one statement,
// in the caller's transaction or its own.
func (s *Store) JobsImport(ctx context.Context, tx any, jobs []*driver.Job) error {
	if err := driver.CheckJobsImport(jobs); err != nil {
		return err
	}
	if len(jobs) == 0 {
		_, err := callerTx(tx)
		return err
	}
	n := len(jobs)
	var (
		ids                        = make([]int64, n)
		entities, keys, checkNames = make([]string, n), make([]string, n), make([]string, n)
		firsts, nexts              = make([]time.Time, n), make([]time.Time, n)
		lasts                      = make([]*time.Time, n)
		checkCounts, failureCounts = make([]int64, n), make([]int64, n)
		lastErrors, payloads       = make([]*string, n), make([]*string, n)
		runtimes, latenesses       = make([]int64, n), make([]int64, n)
		createds, updateds         = make([]time.Time, n), make([]time.Time, n)
		maxID                      int64
	)
	for i, j := range jobs {
		ids[i], entities[i], keys[i], checkNames[i] = j.ID, j.Entity, j.Key, j.Check
		firsts[i], nexts[i] = j.FirstCheckAt, j.NextCheckAt
		if !j.LastCheckAt.IsZero() {
			t := j.LastCheckAt
			lasts[i] = &t
		}
		checkCounts[i], failureCounts[i] = int64(j.CheckCount), int64(j.FailureCount)
		if j.LastError != "" {
			e := j.LastError
			lastErrors[i] = &e
		}
		if len(j.Payload) > 0 {
			p := string(j.Payload)
			payloads[i] = &p
		}
		runtimes[i], latenesses[i] = micros(j.Runtime), micros(j.Lateness)
		createds[i], updateds[i] = j.CreatedAt, j.UpdatedAt
		maxID = max(maxID, j.ID)
	}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		var entity, key, check string
		err := tx.QueryRow(ctx, `
			SELECT j.entity, j.entity_key, j.check_name FROM prescient_jobs j
			JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(entity, entity_key, check_name)
				ON j.entity = k.entity AND j.entity_key = k.entity_key AND j.check_name = k.check_name
			LIMIT 1`, entities, keys, checkNames).Scan(&entity, &key, &check)
		if err == nil {
			return fmt.Errorf("job %s/%s/%s is already pending", entity, key, check)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := idsUnused(ctx, tx, ids); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO prescient_jobs (id, entity, entity_key, check_name, first_check_at, next_check_at,
				last_check_at, check_count, failure_count, last_error, runtime_us, lateness_us,
				payload, created_at, updated_at)
			SELECT id, entity, entity_key, check_name, first_check_at, next_check_at,
				last_check_at, check_count, failure_count, last_error, runtime_us, lateness_us,
				payload::jsonb, created_at, updated_at
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
				$7::timestamptz[], $8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::bigint[],
				$13::text[], $14::timestamptz[], $15::timestamptz[])
				AS i(id, entity, entity_key, check_name, first_check_at, next_check_at,
					last_check_at, check_count, failure_count, last_error, runtime_us, lateness_us,
					payload, created_at, updated_at)`,
			ids, entities, keys, checkNames, firsts, nexts, lasts, checkCounts, failureCounts,
			lastErrors, runtimes, latenesses, payloads, createds, updateds); err != nil {
			return err
		}
		return advanceJobIDs(ctx, tx, maxID)
	})
	if err != nil {
		return fmt.Errorf("import %d job(s): %w", n, interpretError(ctx, err))
	}
	return nil
}

// idsUnused fails naming the first of ids already taken by a pending job or
// a history record: both share the jobs' id sequence.
func idsUnused(ctx context.Context, tx pgx.Tx, ids []int64) error {
	var (
		id    int64
		table string
	)
	err := tx.QueryRow(ctx, `
		SELECT id, 'pending job' FROM prescient_jobs WHERE id = ANY($1)
		UNION ALL
		SELECT id, 'history record' FROM prescient_history WHERE id = ANY($1)
		ORDER BY 1 LIMIT 1`, ids).Scan(&id, &table)
	if err == nil {
		return fmt.Errorf("id %d is already used by a %s", id, table)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	return err
}

// advanceJobIDs moves the sequence behind prescient_jobs.id so that its next
// value is past maxID, never back.
func advanceJobIDs(ctx context.Context, tx pgx.Tx, maxID int64) error {
	var seq string
	if err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence('prescient_jobs', 'id')`).Scan(&seq); err != nil {
		return err
	}
	// seq comes from the server, already quoted.
	var (
		last   int64
		called bool
	)
	if err := tx.QueryRow(ctx, `SELECT last_value, is_called FROM `+seq).Scan(&last, &called); err != nil {
		return err
	}
	if last > maxID || (last == maxID && called) {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT setval($1::regclass, $2, true)`, seq, maxID)
	return err
}

// HistoryExport pages through prescient_history on its primary key.
func (s *Store) HistoryExport(ctx context.Context, afterID int64, limit int) ([]*history.Record, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export history: limit %d must be positive", limit)
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, entity, entity_key, check_name, outcome, first_check_at, last_check_at,
			check_count, failure_count, runtime_us, lateness_us, last_error, payload, created_at,
			finished_at, finished_by
		FROM prescient_history WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("export history after id %d: %w", afterID, interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, scanRecord)
	if err != nil {
		return nil, fmt.Errorf("export history after id %d: %w", afterID, interpretError(ctx, err))
	}
	return out, nil
}

// HistoryImport checks recs for collisions and inserts them with one
// statement, in the caller's transaction or its own.
func (s *Store) HistoryImport(ctx context.Context, tx any, recs []*history.Record) error {
	if err := history.CheckImport(recs); err != nil {
		return err
	}
	if len(recs) == 0 {
		_, err := callerTx(tx)
		return err
	}
	n := len(recs)
	var (
		ids                        = make([]int64, n)
		entities, keys, checkNames = make([]string, n), make([]string, n), make([]string, n)
		outcomes                   = make([]string, n)
		firsts                     = make([]time.Time, n)
		lasts                      = make([]*time.Time, n)
		checkCounts, failureCounts = make([]int64, n), make([]int64, n)
		runtimes, latenesses       = make([]int64, n), make([]int64, n)
		lastErrors, payloads       = make([]*string, n), make([]*string, n)
		createds, finisheds        = make([]time.Time, n), make([]time.Time, n)
		finishedBys                = make([]string, n)
		maxID                      int64
	)
	for i, r := range recs {
		ids[i], entities[i], keys[i], checkNames[i], outcomes[i] = r.ID, r.Entity, r.Key, r.Check, string(r.Outcome)
		firsts[i] = r.FirstCheckAt
		if !r.LastCheckAt.IsZero() {
			t := r.LastCheckAt
			lasts[i] = &t
		}
		checkCounts[i], failureCounts[i] = int64(r.CheckCount), int64(r.FailureCount)
		runtimes[i], latenesses[i] = micros(r.Runtime), micros(r.Lateness)
		if r.LastError != "" {
			e := r.LastError
			lastErrors[i] = &e
		}
		if len(r.Payload) > 0 {
			p := string(r.Payload)
			payloads[i] = &p
		}
		createds[i], finisheds[i], finishedBys[i] = r.CreatedAt, r.FinishedAt, r.FinishedBy
		maxID = max(maxID, r.ID)
	}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		if err := idsUnused(ctx, tx, ids); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
				last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
				created_at, finished_at, finished_by)
			SELECT id, entity, entity_key, check_name, outcome, first_check_at,
				last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload::jsonb,
				created_at, finished_at, finished_by
			FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[],
				$7::timestamptz[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::text[],
				$14::timestamptz[], $15::timestamptz[], $16::text[])
				AS i(id, entity, entity_key, check_name, outcome, first_check_at,
					last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
					created_at, finished_at, finished_by)`,
			ids, entities, keys, checkNames, outcomes, firsts, lasts, checkCounts, failureCounts,
			runtimes, latenesses, lastErrors, payloads, createds, finisheds, finishedBys); err != nil {
			return err
		}
		return advanceJobIDs(ctx, tx, maxID)
	})
	if err != nil {
		return fmt.Errorf("import %d history record(s): %w", n, interpretError(ctx, err))
	}
	return nil
}
