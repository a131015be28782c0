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
)

// jobColumns are the columns scanJob reads.
const jobColumns = `id, entity, entity_key, check_name, first_check_at, next_check_at,
	last_check_at, check_count, failure_count, last_error, runtime_us, lateness_us,
	payload, created_at, updated_at`

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface {
	Scan(dest ...any) error
}

// scanJob reads jobColumns, followed by extra destinations.
func scanJob(row scanner, extra ...any) (*driver.Job, error) {
	var (
		j                             driver.Job
		first, next, created, updated int64
		last                          sql.NullInt64
		lastErr, payload              sql.NullString
		runtimeUS, latenessUS         int64
	)
	dest := append([]any{&j.ID, &j.Entity, &j.Key, &j.Check, &first, &next,
		&last, &j.CheckCount, &j.FailureCount, &lastErr, &runtimeUS, &latenessUS,
		&payload, &created, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	j.FirstCheckAt = fromMicros(first)
	j.NextCheckAt = fromMicros(next)
	j.LastCheckAt = fromNullMicros(last)
	j.CreatedAt = fromMicros(created)
	j.UpdatedAt = fromMicros(updated)
	j.LastError = lastErr.String
	j.Runtime = duration(runtimeUS)
	j.Lateness = duration(latenessUS)
	if payload.Valid {
		j.Payload = json.RawMessage(payload.String)
	}
	return &j, nil
}

// JobSchedule upserts params in the caller's transaction or its own, one job
// at a time in params order: a job named more than once in params is applied
// once per mention, as if scheduled by successive calls. An empty OnConflict
// means ConflictReplace, which moves a job that has never run to a result
// (last_check_at NULL) with its first check. A payload that is not valid JSON
// is an error.
func (s *Store) JobSchedule(ctx context.Context, tx any, params []*driver.JobScheduleParams) ([]*driver.JobScheduleResult, error) {
	for _, p := range params {
		if p.OnConflict != "" && p.OnConflict != driver.ConflictReplace && p.OnConflict != driver.ConflictKeep {
			return nil, fmt.Errorf("schedule %s/%s/%s: unknown conflict rule %q (want %q or %q)",
				p.Entity, p.Key, p.Check, p.OnConflict, driver.ConflictReplace, driver.ConflictKeep)
		}
	}
	results := make([]*driver.JobScheduleResult, len(params))
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		for i, p := range params {
			r, err := scheduleOne(ctx, tx, p)
			if err != nil {
				return fmt.Errorf("%s/%s/%s: %w", p.Entity, p.Key, p.Check, err)
			}
			results[i] = r
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schedule %d job(s): %w", len(params), interpretError(err))
	}
	return results, nil
}

// scheduleInsert is the insert half of both upserts; the ON CONFLICT clause
// and RETURNING follow it.
const scheduleInsert = `
	INSERT INTO prescient_jobs
		(entity, entity_key, check_name, first_check_at, next_check_at, payload, created_at, updated_at)
	VALUES ($1, $2, $3, $4, $4, $5, $6, $6)
	ON CONFLICT (entity, entity_key, check_name) DO `

// scheduleOne upserts one job in tx, which holds the write lock, so the job's
// existence cannot change between the lookup and the upsert.
func scheduleOne(ctx context.Context, tx *sql.Tx, p *driver.JobScheduleParams) (*driver.JobScheduleResult, error) {
	args := []any{p.Entity, p.Key, p.Check, micros(p.At), nullText(p.Payload), micros(p.Now)}
	if p.OnConflict == driver.ConflictKeep {
		j, err := scanJob(tx.QueryRowContext(ctx, scheduleInsert+`NOTHING RETURNING `+jobColumns, args...))
		if err == nil {
			return &driver.JobScheduleResult{Job: j, Inserted: true}, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
		j, err = scanJob(tx.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM prescient_jobs
			WHERE entity = $1 AND entity_key = $2 AND check_name = $3`, p.Entity, p.Key, p.Check))
		if err != nil {
			return nil, err
		}
		return &driver.JobScheduleResult{Job: j}, nil
	}
	var existed bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM prescient_jobs
		WHERE entity = $1 AND entity_key = $2 AND check_name = $3)`, p.Entity, p.Key, p.Check).Scan(&existed); err != nil {
		return nil, err
	}
	// A job that never ran to a result was never due at its old first
	// check: it moves with its next one.
	j, err := scanJob(tx.QueryRowContext(ctx, scheduleInsert+`UPDATE SET
			first_check_at = CASE WHEN last_check_at IS NULL THEN excluded.next_check_at ELSE first_check_at END,
			next_check_at = excluded.next_check_at,
			payload = coalesce(excluded.payload, payload),
			failure_count = 0,
			last_error = NULL,
			updated_at = excluded.updated_at
		RETURNING `+jobColumns, args...))
	if err != nil {
		return nil, err
	}
	return &driver.JobScheduleResult{Job: j, Inserted: !existed}, nil
}

// JobReschedule moves the job's next check to p.At in the caller's
// transaction or its own, and its first check too while no check of it has
// run to a result (last_check_at NULL), as ConflictReplace does. It leaves
// the failure count alone, unlike scheduling with ConflictReplace.
func (s *Store) JobReschedule(ctx context.Context, tx any, p *driver.JobRescheduleParams) (*driver.Job, error) {
	var j *driver.Job
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var err error
		j, err = scanJob(tx.QueryRowContext(ctx, `
			UPDATE prescient_jobs
			SET first_check_at = CASE WHEN last_check_at IS NULL THEN $4 ELSE first_check_at END,
				next_check_at = $4, updated_at = $5
			WHERE entity = $1 AND entity_key = $2 AND check_name = $3
			RETURNING `+jobColumns, p.Entity, p.Key, p.Check, micros(p.At), micros(p.Now)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reschedule %s/%s/%s: %w", p.Entity, p.Key, p.Check, interpretError(err))
	}
	return j, nil
}

// historyMove copies the pending rows matching the WHERE clause that follows
// it to history with the outcome, finished_at and finished_by in $4, $5 and
// $6.
const historyMove = `
	INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, finished_at, finished_by)
	SELECT id, entity, entity_key, check_name, $4, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, $5, $6
	FROM prescient_jobs `

// moveToHistory moves the jobs matching where (over $1..$3) to history with
// the outcome, finish time and finisher given, and returns how many moved.
// tx holds the write lock, so both statements see the same rows.
func moveToHistory(ctx context.Context, tx *sql.Tx, where string, args ...any) (int, error) {
	if _, err := tx.ExecContext(ctx, historyMove+where, args...); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM prescient_jobs `+where, args[:3]...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// JobCancel moves the matching jobs to history as cancelled, in the caller's
// transaction or one of its own. A job being processed is waited for (the
// processor holds the write lock); if it is still pending afterwards, it is
// cancelled.
func (s *Store) JobCancel(ctx context.Context, tx any, p *driver.JobCancelParams) (int, error) {
	var n int
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var err error
		n, err = moveToHistory(ctx, tx, `WHERE entity = $1 AND entity_key = $2 AND ($3 = '' OR check_name = $3)`,
			p.Entity, p.Key, p.Check, "cancelled", micros(p.Now), p.By)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", p.Entity, p.Key, interpretError(err))
	}
	return n, nil
}

// JobCancelCheck moves at most p.Limit jobs of the check after p.After to
// history as cancelled, in one transaction of its own, and returns how many
// and the last. A job being processed is waited for (the processor holds
// the write lock). The identity index is read from p.After on.
func (s *Store) JobCancelCheck(ctx context.Context, p *driver.JobCancelCheckParams) (*driver.JobCancelCheckResult, error) {
	res := &driver.JobCancelCheckResult{}
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `
			SELECT id, entity, entity_key FROM prescient_jobs
			WHERE check_name = $1 AND ($2 = '' OR entity = $2) AND (entity, entity_key) > ($3, $4)
			ORDER BY entity, entity_key LIMIT $5`,
			p.Check, p.Entity, p.After.Entity, p.After.Key, p.Limit)
		if err != nil {
			return err
		}
		var ids []int64
		last := driver.JobRef{}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id, &last.Entity, &last.Key); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, id)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		list, err := json.Marshal(ids)
		if err != nil {
			return err
		}
		// The write lock is held: both statements of the move see the rows
		// just read.
		n, err := moveToHistory(ctx, tx, `WHERE id IN (SELECT value FROM json_each($3))`,
			p.Check, p.Entity, string(list), "cancelled", micros(p.Now), p.By)
		res.Cancelled, res.Last = n, last
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cancel the jobs of check %s: %w", p.Check, interpretError(err))
	}
	return res, nil
}

// JobResolve moves to history as resolved the entity's jobs whose check
// awaits p.Event in prescient_catalog, in the caller's transaction or one of
// its own.
func (s *Store) JobResolve(ctx context.Context, tx any, p *driver.JobResolveParams) (int, error) {
	var n int
	err := s.inTx(ctx, tx, func(tx *sql.Tx) error {
		var err error
		n, err = moveToHistory(ctx, tx, `WHERE entity = $1 AND entity_key = $2 AND check_name IN (
				SELECT c.check_name FROM prescient_catalog c, json_each(c.awaits) e WHERE e.value = $3)`,
			p.Entity, p.Key, p.Event, "resolved", micros(p.Now), p.By)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("resolve %s/%s/%s: %w", p.Entity, p.Key, p.Event, interpretError(err))
	}
	return n, nil
}

// JobGet returns the pending job (entity, key, check), or ErrNotFound.
func (s *Store) JobGet(ctx context.Context, entity, key, check string) (*driver.Job, error) {
	j, err := scanJob(s.db.QueryRowContext(ctx, `
		SELECT `+jobColumns+` FROM prescient_jobs
		WHERE entity = $1 AND entity_key = $2 AND check_name = $3`, entity, key, check))
	if err != nil {
		return nil, fmt.Errorf("get job %s/%s/%s: %w", entity, key, check, interpretError(err))
	}
	return j, nil
}

// JobList lists pending jobs soonest first. Its filters narrow a walk of
// the (next_check_at, id) index (or of the (entity, key, check) one for an
// entity), which stops at p.Limit jobs.
func (s *Store) JobList(ctx context.Context, p *driver.JobListParams) ([]*driver.Job, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v ...any) {
		n := make([]any, len(v))
		for i := range v {
			args = append(args, v[i])
			n[i] = len(args)
		}
		where = append(where, fmt.Sprintf(cond, n...))
	}
	if p.Entity != "" {
		add("entity = $%d", p.Entity)
	}
	if p.Key != "" {
		add("entity_key = $%d", p.Key)
	}
	if p.Check != "" {
		add("check_name = $%d", p.Check)
	}
	if !p.Slot.IsZero() {
		add("next_check_at = $%d", micros(p.Slot))
	}
	if !p.Before.IsZero() {
		add("next_check_at < $%d", micros(p.Before))
	}
	if p.AfterID != 0 {
		add("(next_check_at, id) > ($%d, $%d)", micros(p.AfterAt), p.AfterID)
	}
	sql := `SELECT ` + jobColumns + ` FROM prescient_jobs`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, max(p.Limit, 0))
	sql += fmt.Sprintf(" ORDER BY next_check_at, id LIMIT $%d", len(args))
	rows, err := s.db.QueryContext(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", interpretError(err))
	}
	defer rows.Close()
	jobs := []*driver.Job{}
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", interpretError(err))
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs: %w", interpretError(err))
	}
	return jobs, nil
}

// JobsDue pages through the slot on the (next_check_at, id) index.
func (s *Store) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT id, check_name FROM prescient_jobs
		WHERE next_check_at = $1 AND id > $2
		ORDER BY id LIMIT $3`, micros(p.Slot), p.AfterID, max(p.Limit, 0))
	if err != nil {
		return nil, fmt.Errorf("list jobs due in %s: %w", p.Slot.Format(time.RFC3339), interpretError(err))
	}
	defer rows.Close()
	due := []*driver.DueJob{}
	for rows.Next() {
		var d driver.DueJob
		if err := rows.Scan(&d.ID, &d.Check); err != nil {
			return nil, fmt.Errorf("list jobs due in %s: %w", p.Slot.Format(time.RFC3339), interpretError(err))
		}
		due = append(due, &d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list jobs due in %s: %w", p.Slot.Format(time.RFC3339), interpretError(err))
	}
	return due, nil
}

// JobsOverdueSlots skips from one distinct slot to the next with min() on the
// (next_check_at, id) index, so its cost follows the number of slots listed,
// not the number of overdue jobs.
func (s *Store) JobsOverdueSlots(ctx context.Context, after, before time.Time, limit int) ([]time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `
		WITH RECURSIVE s(slot) AS (
			SELECT (SELECT min(next_check_at) FROM prescient_jobs WHERE next_check_at > $3 AND next_check_at < $1)
			UNION ALL
			SELECT (SELECT min(j.next_check_at) FROM prescient_jobs j
				WHERE j.next_check_at > s.slot AND j.next_check_at < $1)
			FROM s WHERE s.slot IS NOT NULL
		)
		SELECT slot FROM s WHERE slot IS NOT NULL LIMIT $2`, micros(before), max(limit, 0), micros(after))
	if err != nil {
		return nil, fmt.Errorf("list overdue slots: %w", interpretError(err))
	}
	defer rows.Close()
	out := []time.Time{}
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			return nil, fmt.Errorf("list overdue slots: %w", interpretError(err))
		}
		out = append(out, fromMicros(us))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list overdue slots: %w", interpretError(err))
	}
	return out, nil
}

// JobsReslot moves overdue jobs to p.To in one IMMEDIATE transaction. No row
// is ever held by a processor while it runs: a processor holds the write lock
// for its whole transaction, so the reslot waits for it (up to the busy
// timeout) and then sees the jobs it left.
func (s *Store) JobsReslot(ctx context.Context, p *driver.JobsReslotParams) (int, error) {
	except := make([]int64, len(p.Except))
	for i, t := range p.Except {
		except[i] = micros(t)
	}
	exceptJSON, err := json.Marshal(except)
	if err != nil {
		return 0, fmt.Errorf("reslot jobs before %s: %w", p.Before.Format(time.RFC3339), err)
	}
	var n int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		limit := int64(-1) // no limit
		if p.Limit > 0 {
			limit = int64(p.Limit)
		}
		res, err := tx.ExecContext(ctx, `
			UPDATE prescient_jobs SET next_check_at = $2, updated_at = $3
			WHERE id IN (SELECT id FROM prescient_jobs
				WHERE next_check_at < $1 AND next_check_at NOT IN (SELECT value FROM json_each($4))
					AND ($5 IS NULL OR next_check_at >= $5)
				ORDER BY next_check_at, id LIMIT $6)`,
			micros(p.Before), micros(p.To), micros(p.Now), string(exceptJSON), nullMicros(p.From), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reslot jobs before %s: %w", p.Before.Format(time.RFC3339), interpretError(err))
	}
	return int(n), nil
}

// JobStats reads its figures from one snapshot (a read transaction, which in
// WAL mode neither waits for nor blocks the writer). It counts the whole
// pending table and is meant for status, not for a hot path. Upcoming lists
// at most p.Upcoming slots (none when it is 0).
func (s *Store) JobStats(ctx context.Context, p *driver.JobStatsParams) (*driver.JobStats, error) {
	st := &driver.JobStats{Upcoming: []driver.SlotLoad{}, ByCheck: make(map[string]int)}
	err := func() error {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		cur := micros(p.Current)
		var oldest sql.NullInt64
		if err := tx.QueryRowContext(ctx, `
			SELECT count(*), count(CASE WHEN next_check_at < $1 THEN 1 END), min(next_check_at)
			FROM prescient_jobs`, cur).Scan(&st.Pending, &st.Overdue, &oldest); err != nil {
			return err
		}
		if st.Overdue > 0 {
			st.OldestOverdue = fromNullMicros(oldest)
		}
		rows, err := tx.QueryContext(ctx, `
			SELECT next_check_at, count(*) FROM prescient_jobs
			WHERE next_check_at >= $1 GROUP BY 1 ORDER BY 1 LIMIT $2`, cur, max(p.Upcoming, 0))
		if err != nil {
			return err
		}
		for rows.Next() {
			var us int64
			var l driver.SlotLoad
			if err := rows.Scan(&us, &l.Jobs); err != nil {
				rows.Close()
				return err
			}
			l.Slot = fromMicros(us)
			st.Upcoming = append(st.Upcoming, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, `SELECT check_name, count(*) FROM prescient_jobs GROUP BY 1`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var n int
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			st.ByCheck[name] = n
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, fmt.Errorf("job stats: %w", interpretError(err))
	}
	return st, nil
}
