package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient/driver"
)

// jobColumns are the columns scanJob reads, qualified with the alias j.
const jobColumns = `j.id, j.entity, j.entity_key, j.check_name, j.first_check_at, j.next_check_at,
	j.last_check_at, j.check_count, j.failure_count, j.last_error, j.runtime_us, j.lateness_us,
	j.payload, j.created_at, j.updated_at`

// scanJob reads jobColumns, followed by extra destinations.
func scanJob(row pgx.Row, extra ...any) (*driver.Job, error) {
	var (
		j                     driver.Job
		last                  *time.Time
		lastErr               *string
		runtimeUS, latenessUS int64
		payload               []byte
	)
	dest := append([]any{&j.ID, &j.Entity, &j.Key, &j.Check, &j.FirstCheckAt, &j.NextCheckAt,
		&last, &j.CheckCount, &j.FailureCount, &lastErr, &runtimeUS, &latenessUS,
		&payload, &j.CreatedAt, &j.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	j.FirstCheckAt = j.FirstCheckAt.UTC()
	j.NextCheckAt = j.NextCheckAt.UTC()
	j.LastCheckAt = utcOrZero(last)
	j.CreatedAt = j.CreatedAt.UTC()
	j.UpdatedAt = j.UpdatedAt.UTC()
	if lastErr != nil {
		j.LastError = *lastErr
	}
	j.Runtime = duration(runtimeUS)
	j.Lateness = duration(latenessUS)
	if payload != nil {
		j.Payload = json.RawMessage(payload)
	}
	return &j, nil
}

// jobKey is a job's identity.
type jobKey struct{ entity, key, check string }

// JobSchedule upserts params in the caller's transaction or its own. A job
// named more than once in params is applied once per mention, in order, as if
// scheduled by successive calls. An empty OnConflict means ConflictReplace,
// which moves a job that has never run to a result (last_check_at NULL) with
// its first check; a pending job met with ConflictKeep is locked until the
// transaction ends, like one that is replaced. The jobs are locked in lock
// order (see lockOrder), whatever their order in params and whichever rules
// they mix, so that concurrent calls cannot deadlock one another.
func (s *Store) JobSchedule(ctx context.Context, tx any, params []*driver.JobScheduleParams) ([]*driver.JobScheduleResult, error) {
	for _, p := range params {
		if p.OnConflict != "" && p.OnConflict != driver.ConflictReplace && p.OnConflict != driver.ConflictKeep {
			return nil, fmt.Errorf("schedule %s/%s/%s: unknown conflict rule %q (want %q or %q)",
				p.Entity, p.Key, p.Check, p.OnConflict, driver.ConflictReplace, driver.ConflictKeep)
		}
	}
	if len(params) == 0 {
		_, err := callerTx(tx)
		return nil, err
	}
	results := make([]*driver.JobScheduleResult, len(params))
	err := s.inTx(ctx, tx, func(tx pgx.Tx) error {
		rounds := scheduleRounds(params)
		if len(rounds) == 1 {
			copied, err := s.scheduleCopy(ctx, tx, params, rounds[0], results)
			if copied || err != nil {
				return err
			}
		}
		for _, round := range rounds {
			if err := scheduleRound(ctx, tx, params, round, results); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schedule %d job(s): %w", len(params), interpretError(ctx, err))
	}
	return results, nil
}

// copyMin is the fewest jobs scheduleCopy writes with COPY: below it the
// extra round trips cost more than the upsert's conflict handling saves.
const copyMin = 200

// copyPause is how many calls that could use COPY upsert instead after one
// met a job that existed, so that a caller rescheduling jobs does not pay
// for a COPY that fails on every call.
const copyPause = 16

// scheduleCopy writes the jobs params[idx] (each named once, in lock order)
// with COPY when they are all new, which costs the server about half of what
// the upsert does (the upsert inserts each row speculatively and confirms it,
// and returns every row), and reports whether it did. The ids are drawn from
// the sequence first, in lock order as the upsert draws them, so that each
// job is known from its params without reading it back; only payloads are
// read back, as jsonb normalised them. Should any of the jobs exist
// (unique_violation on the identity), the COPY is rolled back to its
// savepoint, having changed nothing, and the caller upserts; a COPY that
// waits for another transaction's insert of the same job waits as the
// upsert would, in the same order. It is not tried below copyMin jobs, nor
// for copyPause calls after one that met an existing job.
func (s *Store) scheduleCopy(ctx context.Context, tx pgx.Tx, params []*driver.JobScheduleParams, idx []int, results []*driver.JobScheduleResult) (bool, error) {
	if len(idx) < copyMin {
		return false, nil
	}
	for n := s.copyPaused.Load(); n > 0; n = s.copyPaused.Load() {
		if s.copyPaused.CompareAndSwap(n, n-1) {
			return false, nil
		}
	}
	rows, err := tx.Query(ctx, `SELECT nextval($1::regclass) FROM generate_series(1, $2)`, s.jobSequence(), len(idx))
	if err != nil {
		return false, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `SAVEPOINT prescient_schedule_copy`); err != nil {
		return false, err
	}
	withPayload := 0
	for _, i := range idx {
		if len(params[i].Payload) > 0 {
			withPayload++
		}
	}
	_, err = tx.CopyFrom(ctx, s.jobsTable(), []string{"id", "entity", "entity_key", "check_name",
		"first_check_at", "next_check_at", "payload", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(idx), func(n int) ([]any, error) {
			// pgx may call this from a goroutine of its own.
			p := params[idx[n]]
			var payload any // NULL
			if len(p.Payload) > 0 {
				payload = string(p.Payload)
			}
			return []any{ids[n], p.Entity, p.Key, p.Check, p.At, p.At, payload, p.Now, p.Now}, nil
		}))
	if err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" /* unique_violation */ {
			return false, err
		}
		// Released too, so that the upsert writes in the caller's
		// transaction itself, not in a subtransaction left open.
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT prescient_schedule_copy; RELEASE SAVEPOINT prescient_schedule_copy`); err != nil {
			return false, err
		}
		s.copyPaused.Store(copyPause)
		return false, nil
	}
	if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT prescient_schedule_copy`); err != nil {
		return false, err
	}
	payloads := make(map[int64][]byte, withPayload)
	if withPayload > 0 {
		read := make([]int64, 0, withPayload)
		for n, i := range idx {
			if len(params[i].Payload) > 0 {
				read = append(read, ids[n])
			}
		}
		rows, err := tx.Query(ctx, `SELECT id, payload FROM prescient_jobs WHERE id = ANY ($1)`, read)
		if err != nil {
			return false, err
		}
		var (
			id      int64
			payload []byte
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &payload}, func() error {
			payloads[id] = payload
			return nil
		}); err != nil {
			return false, err
		}
	}
	for n, i := range idx {
		results[i] = &driver.JobScheduleResult{Job: newJob(ids[n], params[i], payloads[ids[n]]), Inserted: true}
	}
	return true, nil
}

// jobsTable names prescient_jobs for CopyFrom, which the statements'
// qualification (schemaTx) does not reach.
func (s *Store) jobsTable() pgx.Identifier {
	if s.schema == "" {
		return pgx.Identifier{"prescient_jobs"}
	}
	return pgx.Identifier{s.schema, "prescient_jobs"}
}

// jobSequence names the sequence of prescient_jobs.id.
func (s *Store) jobSequence() string {
	if s.schema == "" {
		return "prescient_jobs_id_seq"
	}
	return pgx.Identifier{s.schema, "prescient_jobs_id_seq"}.Sanitize()
}

// scheduleRounds splits the indexes of params into rounds in which no job
// appears twice (round n holds the n-th mention of each job), because one
// upsert statement may not touch a row twice. Every job of a later round is in
// the first, so only the first round takes locks. Each round is in lock order
// (see lockOrder): Go compares strings byte by byte, as COLLATE "C" does, and
// sorting here rather than in the statement saves the server a sort by three
// text columns (about a tenth of the upsert's time for 10,000 jobs).
func scheduleRounds(params []*driver.JobScheduleParams) [][]int {
	seen := make(map[jobKey]int, len(params))
	var rounds [][]int
	for i, p := range params {
		k := jobKey{p.Entity, p.Key, p.Check}
		n := seen[k]
		seen[k] = n + 1
		if n == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[n] = append(rounds[n], i)
	}
	for _, round := range rounds {
		slices.SortFunc(round, func(a, b int) int {
			pa, pb := params[a], params[b]
			return cmp.Or(strings.Compare(pa.Entity, pb.Entity), strings.Compare(pa.Key, pb.Key), strings.Compare(pa.Check, pb.Check))
		})
	}
	return rounds
}

// scheduleArgs returns the unnest arrays of the jobs params[idx].
func scheduleArgs(params []*driver.JobScheduleParams, idx []int) []any {
	var (
		entities = make([]string, len(idx))
		keys     = make([]string, len(idx))
		checks   = make([]string, len(idx))
		ats      = make([]time.Time, len(idx))
		payloads = make([]*string, len(idx))
		nows     = make([]time.Time, len(idx))
	)
	for n, i := range idx {
		p := params[i]
		entities[n], keys[n], checks[n], ats[n], nows[n] = p.Entity, p.Key, p.Check, p.At, p.Now
		if len(p.Payload) > 0 {
			s := string(p.Payload)
			payloads[n] = &s
		}
	}
	return []any{entities, keys, checks, ats, payloads, nows}
}

// lockOrder returns the order, over the table alias a, in which the
// statements of schedule, cancel and resolve that may wait for several jobs'
// row locks take them: by identity, in byte order (COLLATE "C", the same
// whatever the database's collation). Two such calls, each in a transaction
// of its own, then never wait for each other in a cycle (deadlock detected,
// SQLSTATE 40P01). By identity rather than by id, because an upsert also
// waits for jobs that have no id yet: an insert racing another insert of the
// same job waits for it. Migration 00007 gives prescient_finish, under
// prescient_cancel and prescient_resolve, the same order. The engine's
// claims skip locked jobs instead of waiting, except the claim that reapplies
// decisions after a failed commit (claimSQL), which waits in this order too,
// under a lock_timeout.
func lockOrder(a string) string {
	return a + `.entity COLLATE "C", ` + a + `.entity_key COLLATE "C", ` + a + `.check_name COLLATE "C"`
}

// scheduleInsert is the insert half of both upserts, its rows in the order of
// the arrays, which scheduleRounds put in lock order; the ON CONFLICT clause
// and scheduleReturning follow it.
const scheduleInsert = `
	INSERT INTO prescient_jobs AS j
		(entity, entity_key, check_name, first_check_at, next_check_at, payload, created_at, updated_at)
	SELECT i.entity, i.entity_key, i.check_name, i.at, i.at, i.payload::jsonb, i.now, i.now
	FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::timestamptz[])
		WITH ORDINALITY AS i(entity, entity_key, check_name, at, payload, now, n)
	ORDER BY i.n
	ON CONFLICT (entity, entity_key, check_name) DO UPDATE`

// scheduleReturning is what an upsert returns of each row it inserts or
// updates, in the order of its input: enough to know the row and to fill a
// new job in from its params (the payload as jsonb normalised it). The jobs
// it updated are then read whole by id (readUpdated).
const scheduleReturning = `
	RETURNING j.id, j.entity, j.entity_key, j.check_name, j.payload, j.xmax = 0`

// replaceSet is what ConflictReplace does to a pending job j, given the job
// as scheduled in excluded: it moves its next check, and its first check too
// while no check has run to a result (a job rescheduled before it ever ran
// was never due at its old first check); it replaces the payload when a new
// one is given, and clears the failures. prescient_schedule (migration 00006)
// applies the same rule.
const replaceSet = `
	SET first_check_at = CASE WHEN j.last_check_at IS NULL THEN excluded.next_check_at ELSE j.first_check_at END,
		next_check_at = excluded.next_check_at,
		payload = coalesce(excluded.payload, j.payload),
		failure_count = 0,
		last_error = NULL,
		updated_at = excluded.updated_at`

// scheduleRound upserts the jobs params[idx], each named once. A round that
// mixes the rules would take its locks in two passes, one per rule, so its
// jobs are all inserted or locked by the keep upsert first, and those to
// replace that were pending are then updated.
func scheduleRound(ctx context.Context, tx pgx.Tx, params []*driver.JobScheduleParams, idx []int, results []*driver.JobScheduleResult) error {
	var replace []int
	for _, i := range idx {
		if params[i].OnConflict != driver.ConflictKeep {
			replace = append(replace, i)
		}
	}
	switch len(replace) {
	case len(idx):
		return scheduleReplace(ctx, tx, params, idx, results)
	case 0:
		return scheduleKeep(ctx, tx, params, idx, results)
	}
	if err := scheduleKeep(ctx, tx, params, idx, results); err != nil {
		return err
	}
	var pending []int
	for _, i := range replace {
		if !results[i].Inserted {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		UPDATE prescient_jobs AS j`+replaceSet+`
		FROM (
			SELECT i.entity, i.entity_key, i.check_name, i.at AS next_check_at,
				i.payload::jsonb AS payload, i.now AS updated_at
			FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::timestamptz[])
				AS i(entity, entity_key, check_name, at, payload, now)
		) AS excluded
		WHERE j.entity = excluded.entity AND j.entity_key = excluded.entity_key AND j.check_name = excluded.check_name
		RETURNING `+jobColumns+`, false`, scheduleArgs(params, pending)...)
	if err != nil {
		return err
	}
	got, err := collectScheduled(rows)
	if err != nil {
		return err
	}
	return placeScheduled(params, pending, got, results)
}

// scheduleReplace upserts the jobs params[idx] with ConflictReplace.
func scheduleReplace(ctx context.Context, tx pgx.Tx, params []*driver.JobScheduleParams, idx []int, results []*driver.JobScheduleResult) error {
	rows, err := tx.Query(ctx, scheduleInsert+replaceSet+scheduleReturning, scheduleArgs(params, idx)...)
	if err != nil {
		return err
	}
	updated, err := readScheduled(rows, params, idx, results)
	if err != nil {
		return err
	}
	return readUpdated(ctx, tx, updated, results)
}

// scheduleKeep upserts the jobs params[idx] with ConflictKeep: the insert
// returns the new rows only, and locks the pending ones it leaves alone, which
// a second query then reads.
func scheduleKeep(ctx context.Context, tx pgx.Tx, params []*driver.JobScheduleParams, idx []int, results []*driver.JobScheduleResult) error {
	args := scheduleArgs(params, idx)
	rows, err := tx.Query(ctx, scheduleInsert+`
		SET updated_at = j.updated_at WHERE false`+scheduleReturning, args...)
	if err != nil {
		return err
	}
	if _, err := readScheduled(rows, params, idx, results); err != nil {
		return err
	}
	var kept []int
	for _, i := range idx {
		if results[i] == nil {
			kept = append(kept, i)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	rows, err = tx.Query(ctx, `
		SELECT `+jobColumns+`, false FROM prescient_jobs j
		JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(entity, entity_key, check_name)
			ON j.entity = k.entity AND j.entity_key = k.entity_key AND j.check_name = k.check_name`,
		scheduleArgs(params, kept)[:3]...)
	if err != nil {
		return err
	}
	got, err := collectScheduled(rows)
	if err != nil {
		return err
	}
	return placeScheduled(params, kept, got, results)
}

// readScheduled reads the rows of an upsert of params[idx] (scheduleReturning)
// into results: a job it inserted is filled in from its params, and the ids
// of those it updated are returned with their params index, to be read
// whole. Rows come back in the order of idx, which is checked, so that no
// string is allocated per row; should they not, they are matched by identity.
func readScheduled(rows pgx.Rows, params []*driver.JobScheduleParams, idx []int, results []*driver.JobScheduleResult) (updated map[int64]int, err error) {
	defer rows.Close()
	var byKey map[jobKey]int // built if the rows come out of order
	n := 0
	for rows.Next() {
		raw := rows.RawValues()
		if len(raw) != 6 {
			return nil, fmt.Errorf("upsert returned %d columns, want 6", len(raw))
		}
		i := -1
		for byKey == nil && n < len(idx) {
			p := params[idx[n]]
			n++
			if string(raw[1]) == p.Entity && string(raw[2]) == p.Key && string(raw[3]) == p.Check {
				i = idx[n-1]
				break
			}
		}
		if i < 0 {
			if byKey == nil {
				byKey = make(map[jobKey]int, len(idx))
				for _, i := range idx {
					p := params[i]
					byKey[jobKey{p.Entity, p.Key, p.Check}] = i
				}
			}
			var ok bool
			if i, ok = byKey[jobKey{string(raw[1]), string(raw[2]), string(raw[3])}]; !ok {
				return nil, fmt.Errorf("upsert returned job %s/%s/%s, which it was not given", raw[1], raw[2], raw[3])
			}
		}
		var (
			id       int64
			payload  []byte
			inserted bool
		)
		if err := rows.Scan(&id, nil, nil, nil, &payload, &inserted); err != nil {
			return nil, err
		}
		if !inserted {
			if updated == nil {
				updated = make(map[int64]int)
			}
			updated[id] = i
			continue
		}
		results[i] = &driver.JobScheduleResult{Job: newJob(id, params[i], payload), Inserted: true}
	}
	return updated, rows.Err()
}

// newJob is the row an upsert inserted for p, with id.
func newJob(id int64, p *driver.JobScheduleParams, payload []byte) *driver.Job {
	// The database keeps microseconds.
	now := p.Now.UTC().Truncate(time.Microsecond)
	at := p.At.UTC().Truncate(time.Microsecond)
	j := &driver.Job{ID: id, Entity: p.Entity, Key: p.Key, Check: p.Check,
		FirstCheckAt: at, NextCheckAt: at, CreatedAt: now, UpdatedAt: now}
	if payload != nil {
		j.Payload = json.RawMessage(payload)
	}
	return j
}

// readUpdated reads the jobs an upsert updated (id → params index) whole
// into results.
func readUpdated(ctx context.Context, tx pgx.Tx, updated map[int64]int, results []*driver.JobScheduleResult) error {
	if len(updated) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(updated))
	for id := range updated {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, `SELECT `+jobColumns+` FROM prescient_jobs j WHERE j.id = ANY ($1)`, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return err
		}
		results[updated[j.ID]] = &driver.JobScheduleResult{Job: j}
		delete(updated, j.ID)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for id := range updated {
		return fmt.Errorf("job %d missing after upsert", id)
	}
	return nil
}

// collectScheduled reads rows of jobColumns and an inserted flag by identity.
func collectScheduled(rows pgx.Rows) (map[jobKey]*driver.JobScheduleResult, error) {
	defer rows.Close()
	got := make(map[jobKey]*driver.JobScheduleResult)
	for rows.Next() {
		var inserted bool
		j, err := scanJob(rows, &inserted)
		if err != nil {
			return nil, err
		}
		got[jobKey{j.Entity, j.Key, j.Check}] = &driver.JobScheduleResult{Job: j, Inserted: inserted}
	}
	return got, rows.Err()
}

// placeScheduled puts each job's row at its params index.
func placeScheduled(params []*driver.JobScheduleParams, idx []int, got map[jobKey]*driver.JobScheduleResult, results []*driver.JobScheduleResult) error {
	for _, i := range idx {
		p := params[i]
		r, ok := got[jobKey{p.Entity, p.Key, p.Check}]
		if !ok {
			return fmt.Errorf("job %s/%s/%s missing after upsert", p.Entity, p.Key, p.Check)
		}
		results[i] = r
	}
	return nil
}

// JobReschedule moves the job's next check to p.At in the caller's
// transaction or its own, and its first check too while no check of it has
// run to a result (last_check_at NULL), as ConflictReplace does. It leaves
// the failure count alone, unlike scheduling with ConflictReplace.
func (s *Store) JobReschedule(ctx context.Context, tx any, p *driver.JobRescheduleParams) (*driver.Job, error) {
	q, err := s.on(tx)
	if err != nil {
		return nil, fmt.Errorf("reschedule %s/%s/%s: %w", p.Entity, p.Key, p.Check, err)
	}
	j, err := scanJob(q.QueryRow(ctx, `
		UPDATE prescient_jobs j
		SET first_check_at = CASE WHEN j.last_check_at IS NULL THEN $4 ELSE j.first_check_at END,
			next_check_at = $4, updated_at = $5
		WHERE j.entity = $1 AND j.entity_key = $2 AND j.check_name = $3
		RETURNING `+jobColumns, p.Entity, p.Key, p.Check, p.At, p.Now))
	if err != nil {
		return nil, fmt.Errorf("reschedule %s/%s/%s: %w", p.Entity, p.Key, p.Check, interpretError(ctx, err))
	}
	return j, nil
}

// lockedMove moves the jobs of prescient_jobs j that the WHERE clause where
// selects to history, locking them first in lock order, with the outcome,
// finished_at and finished_by in $4, $5 and $6.
func lockedMove(where string) string {
	return `
		WITH locked AS MATERIALIZED (
			SELECT j.id FROM prescient_jobs j ` + where + `
			ORDER BY ` + lockOrder("j") + `
			FOR UPDATE OF j
		), gone AS (
			DELETE FROM prescient_jobs j USING locked l WHERE j.id = l.id
			RETURNING j.*
		)` + historyMove
}

// historyMove follows a CTE named gone (DELETE … RETURNING j.*) and copies
// its rows to history with the outcome, finished_at and finished_by in $4, $5
// and $6.
const historyMove = `
	INSERT INTO prescient_history (id, entity, entity_key, check_name, outcome, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, finished_at, finished_by)
	SELECT id, entity, entity_key, check_name, $4::text, first_check_at,
		last_check_at, check_count, failure_count, runtime_us, lateness_us, last_error, payload,
		created_at, $5::timestamptz, $6::text
	FROM gone`

// JobCancel moves the matching jobs to history as cancelled, in the caller's
// transaction or as one statement of its own. A job being processed is waited
// for; if it is still pending afterwards, it is cancelled. The jobs are locked
// in lock order (see lockOrder).
func (s *Store) JobCancel(ctx context.Context, tx any, p *driver.JobCancelParams) (int, error) {
	q, err := s.on(tx)
	if err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", p.Entity, p.Key, err)
	}
	tag, err := q.Exec(ctx, lockedMove(`
			WHERE j.entity = $1 AND j.entity_key = $2 AND ($3 = '' OR j.check_name = $3)`),
		p.Entity, p.Key, p.Check, "cancelled", p.Now, p.By)
	if err != nil {
		return 0, fmt.Errorf("cancel %s/%s: %w", p.Entity, p.Key, interpretError(ctx, err))
	}
	return int(tag.RowsAffected()), nil
}

// JobCancelCheck moves at most p.Limit jobs of the check after p.After to
// history as cancelled, as one statement of its own, locking them in lock
// order (see lockOrder), and returns how many and the last. A job being
// processed is waited for. The identity index is read from p.After on.
func (s *Store) JobCancelCheck(ctx context.Context, p *driver.JobCancelCheckParams) (*driver.JobCancelCheckResult, error) {
	res := &driver.JobCancelCheckResult{}
	err := s.pool.QueryRow(ctx, `
		WITH locked AS MATERIALIZED (
			SELECT j.id, j.entity, j.entity_key FROM prescient_jobs j
			WHERE j.check_name = $1 AND ($2 = '' OR j.entity = $2)
				AND (j.entity, j.entity_key) > ($7::text COLLATE "C", $8::text COLLATE "C")
			ORDER BY `+lockOrder("j")+`
			LIMIT $3
			FOR UPDATE OF j
		), gone AS (
			DELETE FROM prescient_jobs j USING locked l WHERE j.id = l.id
			RETURNING j.*
		), moved AS (`+historyMove+`
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM moved), l.entity, l.entity_key FROM locked l
		ORDER BY l.entity COLLATE "C" DESC, l.entity_key COLLATE "C" DESC LIMIT 1`,
		p.Check, p.Entity, p.Limit, "cancelled", p.Now, p.By, p.After.Entity, p.After.Key).
		Scan(&res.Cancelled, &res.Last.Entity, &res.Last.Key)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return res, nil
	case err != nil:
		return nil, fmt.Errorf("cancel the jobs of check %s: %w", p.Check, interpretError(ctx, err))
	}
	return res, nil
}

// JobResolve moves to history as resolved the entity's jobs whose check
// awaits p.Event in prescient_catalog, in the caller's transaction or as one
// statement of its own. The jobs are locked in lock order (see lockOrder).
func (s *Store) JobResolve(ctx context.Context, tx any, p *driver.JobResolveParams) (int, error) {
	q, err := s.on(tx)
	if err != nil {
		return 0, fmt.Errorf("resolve %s/%s/%s: %w", p.Entity, p.Key, p.Event, err)
	}
	tag, err := q.Exec(ctx, lockedMove(`
			WHERE j.entity = $1 AND j.entity_key = $2
				AND j.check_name IN (SELECT c.check_name FROM prescient_catalog c WHERE $3 = ANY (c.awaits))`),
		p.Entity, p.Key, p.Event, "resolved", p.Now, p.By)
	if err != nil {
		return 0, fmt.Errorf("resolve %s/%s/%s: %w", p.Entity, p.Key, p.Event, interpretError(ctx, err))
	}
	return int(tag.RowsAffected()), nil
}

// JobGet returns the pending job (entity, key, check), or ErrNotFound.
func (s *Store) JobGet(ctx context.Context, entity, key, check string) (*driver.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `
		SELECT `+jobColumns+` FROM prescient_jobs j
		WHERE j.entity = $1 AND j.entity_key = $2 AND j.check_name = $3`, entity, key, check))
	if err != nil {
		return nil, fmt.Errorf("get job %s/%s/%s: %w", entity, key, check, interpretError(ctx, err))
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
		add("j.entity = $%d", p.Entity)
	}
	if p.Key != "" {
		add("j.entity_key = $%d", p.Key)
	}
	if p.Check != "" {
		add("j.check_name = $%d", p.Check)
	}
	if !p.Slot.IsZero() {
		add("j.next_check_at = $%d", p.Slot)
	}
	if !p.Before.IsZero() {
		add("j.next_check_at < $%d", p.Before)
	}
	if p.AfterID != 0 {
		add("(j.next_check_at, j.id) > ($%d, $%d)", p.AfterAt, p.AfterID)
	}
	sql := `SELECT ` + jobColumns + ` FROM prescient_jobs j`
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, max(p.Limit, 0))
	sql += fmt.Sprintf(" ORDER BY j.next_check_at, j.id LIMIT $%d", len(args))
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", interpretError(ctx, err))
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.Job, error) { return scanJob(row) })
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", interpretError(ctx, err))
	}
	return jobs, nil
}

// JobsDue pages through the slot on the (next_check_at, id) index, through
// prescient_jobs_due, whose plan is pinned (see its migration).
func (s *Store) JobsDue(ctx context.Context, p *driver.JobsDueParams) ([]*driver.DueJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, check_name FROM prescient_jobs_due($1, $2, $3)`, p.Slot, p.AfterID, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list jobs due in %s: %w", p.Slot.Format(time.RFC3339), interpretError(ctx, err))
	}
	due, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*driver.DueJob, error) {
		var d driver.DueJob
		return &d, row.Scan(&d.ID, &d.Check)
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs due in %s: %w", p.Slot.Format(time.RFC3339), interpretError(ctx, err))
	}
	return due, nil
}

// JobsOverdueSlots skips from one distinct slot to the next on the
// (next_check_at, id) index, so its cost follows the number of slots listed,
// not the number of overdue jobs.
func (s *Store) JobsOverdueSlots(ctx context.Context, after, before time.Time, limit int) ([]time.Time, error) {
	rows, err := s.pool.Query(ctx, `
		WITH RECURSIVE s(slot) AS (
			(SELECT next_check_at FROM prescient_jobs WHERE next_check_at > $3 AND next_check_at < $1
				ORDER BY next_check_at LIMIT 1)
			UNION ALL
			SELECT (SELECT j.next_check_at FROM prescient_jobs j
				WHERE j.next_check_at > s.slot AND j.next_check_at < $1
				ORDER BY j.next_check_at LIMIT 1)
			FROM s WHERE s.slot IS NOT NULL
		)
		SELECT slot FROM s WHERE slot IS NOT NULL LIMIT $2`, before, limit, after)
	if err != nil {
		return nil, fmt.Errorf("list overdue slots: %w", interpretError(ctx, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (time.Time, error) {
		var t time.Time
		err := row.Scan(&t)
		return t.UTC(), err
	})
	if err != nil {
		return nil, fmt.Errorf("list overdue slots: %w", interpretError(ctx, err))
	}
	return out, nil
}

// JobsReslot moves overdue jobs not held by a processor to p.To.
func (s *Store) JobsReslot(ctx context.Context, p *driver.JobsReslotParams) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE prescient_jobs SET next_check_at = $2, updated_at = $3
		WHERE id IN (SELECT id FROM prescient_jobs WHERE next_check_at < $1 AND next_check_at <> ALL ($4::timestamptz[])
			AND ($5::timestamptz IS NULL OR next_check_at >= $5)
			ORDER BY next_check_at, id LIMIT $6
			FOR UPDATE SKIP LOCKED)`,
		p.Before, p.To, p.Now, append([]time.Time{}, p.Except...), nullTime(p.From), // not NULL: <> ALL (NULL) matches no row
		nullLimit(p.Limit))
	if err != nil {
		return 0, fmt.Errorf("reslot jobs before %s: %w", p.Before.Format(time.RFC3339), interpretError(ctx, err))
	}
	return int(tag.RowsAffected()), nil
}

// JobStats reads its figures from one snapshot. It counts the whole pending
// table and is meant for status, not for a hot path. Upcoming lists at most
// p.Upcoming slots (none when it is 0).
func (s *Store) JobStats(ctx context.Context, p *driver.JobStatsParams) (*driver.JobStats, error) {
	st := &driver.JobStats{ByCheck: make(map[string]int)}
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		var oldest *time.Time
		err := tx.QueryRow(ctx, `
			SELECT count(*), count(*) FILTER (WHERE next_check_at < $1), min(next_check_at)
			FROM prescient_jobs`, p.Current).Scan(&st.Pending, &st.Overdue, &oldest)
		if err != nil {
			return err
		}
		if st.Overdue > 0 {
			st.OldestOverdue = utcOrZero(oldest)
		}
		rows, err := tx.Query(ctx, `
			SELECT next_check_at, count(*) FROM prescient_jobs
			WHERE next_check_at >= $1 GROUP BY 1 ORDER BY 1 LIMIT $2`, p.Current, max(p.Upcoming, 0))
		if err != nil {
			return err
		}
		st.Upcoming, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (driver.SlotLoad, error) {
			var l driver.SlotLoad
			err := row.Scan(&l.Slot, &l.Jobs)
			l.Slot = l.Slot.UTC()
			return l, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT check_name, count(*) FROM prescient_jobs GROUP BY 1`)
		if err != nil {
			return err
		}
		var name string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
			st.ByCheck[name] = n
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("job stats: %w", interpretError(ctx, err))
	}
	return st, nil
}

// nullLimit is a LIMIT's argument: NULL (no limit) unless n is positive.
func nullLimit(n int) *int64 {
	if n <= 0 {
		return nil
	}
	v := int64(n)
	return &v
}
