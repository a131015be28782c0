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
	rows, err := s.pool.Query(ctx, `SELECT check_name, awaits, entity FROM prescient_catalog ORDER BY check_name COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("list catalog: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.CatalogEntry, error) {
		var e driver.CatalogEntry
		err := row.Scan(&e.Check, &e.Awaits, &e.Entity)
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
	return advanceSequence(ctx, tx, "prescient_jobs", maxID)
}

// advanceSequence moves the sequence behind table's id column so that its
// next value is past maxID, never back.
func advanceSequence(ctx context.Context, tx pgx.Tx, table string, maxID int64) error {
	var seq string
	if err := tx.QueryRow(ctx, `SELECT pg_get_serial_sequence($1, 'id')`, table).Scan(&seq); err != nil {
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

// OutboxExport pages through prescient_outbox on its primary key, and
// reads the page's deliveries in a second statement of the same snapshot.
func (s *Store) OutboxExport(ctx context.Context, afterID int64, limit int) ([]*driver.OutboxEntry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("export events: limit %d must be positive", limit)
	}
	var out []*driver.OutboxEntry
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, idempotency_key, event, stage, severity, entity, entity_key, check_name, job_id, payload, created_at
			FROM prescient_outbox WHERE id > $1 ORDER BY id LIMIT $2`, afterID, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.OutboxEntry, error) {
			en := &driver.OutboxEntry{Deliveries: []*driver.Delivery{}}
			e := &en.Event
			var payload []byte
			err := row.Scan(&e.ID, &e.IdempotencyKey, &e.Event, &e.Stage, &e.Severity, &e.Entity, &e.Key, &e.Check,
				&e.JobID, &payload, &e.CreatedAt)
			e.CreatedAt = e.CreatedAt.UTC()
			if payload != nil {
				e.Payload = payload
			}
			return en, err
		})
		if err != nil || len(out) == 0 {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT `+deliveryColumns+`
			FROM prescient_deliveries d JOIN prescient_outbox o ON o.id = d.event_id
			WHERE d.event_id BETWEEN $1 AND $2 ORDER BY d.event_id, d.sink COLLATE "C"`, out[0].Event.ID, out[len(out)-1].Event.ID)
		if err != nil {
			return err
		}
		ds, err := pgx.CollectRows(rows, scanDelivery)
		if err != nil {
			return err
		}
		byID := make(map[int64]*driver.OutboxEntry, len(out))
		for _, en := range out {
			byID[en.Event.ID] = en
		}
		for _, d := range ds {
			en := byID[d.Event.ID]
			d.Event = nil
			en.Deliveries = append(en.Deliveries, d)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("export events after id %d: %w", afterID, interpretError(ctx, err))
	}
	if out == nil {
		out = []*driver.OutboxEntry{}
	}
	return out, nil
}

// OutboxImport checks entries for collisions and inserts the events with
// one statement and their deliveries with another, in the caller's
// transaction or its own.
func (s *Store) OutboxImport(ctx context.Context, tx any, entries []*driver.OutboxEntry) error {
	if err := driver.CheckOutboxImport(entries); err != nil {
		return err
	}
	if len(entries) == 0 {
		_, err := callerTx(tx)
		return err
	}
	n := len(entries)
	var (
		ids, jobIDs                      = make([]int64, n), make([]int64, n)
		keys, events, stages, severities = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		entities, entityKeys, checkNames = make([]string, n), make([]string, n), make([]string, n)
		payloads                         = make([]*string, n)
		createds                         = make([]time.Time, n)
		dEvents                          []int64
		dSinks, dStates                  []string
		dAttempts                        []int64
		dNexts, dUpdateds                []time.Time
		dStatuses                        []*int64
		dErrors                          []*string
		dDelivereds                      []*time.Time
		maxID                            int64
	)
	for i, en := range entries {
		e := &en.Event
		ids[i], jobIDs[i], keys[i], events[i], stages[i], severities[i] = e.ID, e.JobID, e.IdempotencyKey, e.Event, e.Stage, e.Severity
		entities[i], entityKeys[i], checkNames[i], createds[i] = e.Entity, e.Key, e.Check, e.CreatedAt
		if len(e.Payload) > 0 {
			p := string(e.Payload)
			payloads[i] = &p
		}
		maxID = max(maxID, e.ID)
		for _, d := range en.Deliveries {
			dEvents, dSinks, dStates = append(dEvents, e.ID), append(dSinks, d.Sink), append(dStates, string(d.State))
			dAttempts, dNexts, dUpdateds = append(dAttempts, int64(d.Attempts)), append(dNexts, d.NextAttemptAt), append(dUpdateds, d.UpdatedAt)
			var (
				status    *int64
				lastErr   *string
				delivered *time.Time
			)
			if d.LastStatus != 0 {
				v := int64(d.LastStatus)
				status = &v
			}
			if d.LastError != "" {
				v := d.LastError
				lastErr = &v
			}
			if !d.DeliveredAt.IsZero() {
				v := d.DeliveredAt
				delivered = &v
			}
			dStatuses, dErrors, dDelivereds = append(dStatuses, status), append(dErrors, lastErr), append(dDelivereds, delivered)
		}
	}
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		var (
			id      int64
			key     string
			sameKey bool
		)
		err := tx.QueryRow(ctx, `
			SELECT o.id, o.idempotency_key, o.idempotency_key = ANY($2) FROM prescient_outbox o
			WHERE o.id = ANY($1) OR o.idempotency_key = ANY($2)
			ORDER BY o.id LIMIT 1`, ids, keys).Scan(&id, &key, &sameKey)
		switch {
		case err == nil && sameKey:
			return fmt.Errorf("event %s is already recorded", key)
		case err == nil:
			return fmt.Errorf("event id %d is already used by event %s", id, key)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO prescient_outbox (id, created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload, idempotency_key)
			OVERRIDING SYSTEM VALUE
			SELECT id, created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload::jsonb, idempotency_key
			FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],
				$8::text[], $9::text[], $10::text[], $11::text[])
				AS i(id, created_at, job_id, entity, entity_key, check_name, stage, event, severity, payload, idempotency_key)`,
			ids, createds, jobIDs, entities, entityKeys, checkNames, stages, events, severities, payloads, keys); err != nil {
			return err
		}
		if len(dEvents) > 0 {
			if _, err := tx.Exec(ctx, `
				INSERT INTO prescient_deliveries (event_id, sink, state, attempts, next_attempt_at, last_status, last_error,
					delivered_at, updated_at)
				SELECT event_id, sink, state, attempts, next_attempt_at, last_status, last_error, delivered_at, updated_at
				FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::int[], $7::text[],
					$8::timestamptz[], $9::timestamptz[])
					AS i(event_id, sink, state, attempts, next_attempt_at, last_status, last_error, delivered_at, updated_at)`,
				dEvents, dSinks, dStates, dAttempts, dNexts, dStatuses, dErrors, dDelivereds, dUpdateds); err != nil {
				return err
			}
		}
		return advanceEventIDs(ctx, tx, maxID)
	})
	if err != nil {
		return fmt.Errorf("import %d event(s): %w", n, interpretError(ctx, err))
	}
	return nil
}

// advanceEventIDs moves the identity behind prescient_outbox.id past maxID,
// never back.
func advanceEventIDs(ctx context.Context, tx pgx.Tx, maxID int64) error {
	return advanceSequence(ctx, tx, "prescient_outbox", maxID)
}

// AttemptsImport records attempts left behind by another store's servers
// (`prescient copy`), in tx: each names jobs whose checks started and never
// finished, and counts against them here as it did there
// (retry.max_unfinished). Each gets a new id; its server, slot, start and
// jobs are kept.
func (s *Store) AttemptsImport(ctx context.Context, tx any, attempts []*driver.Attempt) error {
	if len(attempts) == 0 {
		_, err := callerTx(tx)
		return err
	}
	b := &pgx.Batch{}
	for _, a := range attempts {
		b.Queue(`INSERT INTO prescient_attempts (server, slot, started_at, job_ids) VALUES ($1, $2, $3, $4)`,
			a.Server, a.Slot, a.StartedAt, a.JobIDs)
	}
	err := s.inTx(ctx, tx, func(t pgx.Tx) error { return t.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("import attempts: %w", interpretError(ctx, err))
	}
	return nil
}
