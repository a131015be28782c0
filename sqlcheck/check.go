package sqlcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/postgres"
)

// Check is a declared check whose query is prepared: its Batch is the
// checks.BatchFunc the engine runs.
type Check struct {
	spec    Spec
	dialect Dialect
	// db prepares the query again when its columns change under a running
	// server (see reprepare); nil for a check made by New.
	db Database
	// mu serialises reprepare.
	mu    sync.Mutex
	shape atomic.Pointer[shape]
}

// shape is how a check reads its query's rows, as the query was prepared.
// A call reads one shape from start to end, so that a query prepared again
// meanwhile cannot change how its rows are read halfway.
type shape struct {
	columns []Column
	zone    *time.Location // Statement.Zone, for Zoneless columns
	// keysType is Statement.KeysType: $1 read as integers.
	keysType string
	// keyCol and anchorCol index columns; anchorCol is -1 without an
	// anchor column.
	keyCol, anchorCol int
}

// Prepare validates spec (Spec.Validate), prepares its query against db and
// returns the check. Every problem is a *FieldError naming the field
// ("query", "anchor", "stages[1].after"), joined with errors.Join; a
// database that cannot be reached is returned as it is (not a
// *FieldError), so that a caller may try again.
func Prepare(ctx context.Context, db Database, spec Spec) (*Check, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	st, err := db.Describe(ctx, spec.Query)
	if err != nil {
		var qe *QueryError
		if errors.As(err, &qe) {
			return nil, &FieldError{Field: "query", Err: err}
		}
		return nil, fmt.Errorf("check %s: prepare the query: %w", spec.Name, err)
	}
	c, err := New(spec, st)
	if err != nil {
		return nil, err
	}
	c.db = db
	return c, nil
}

// New returns the check spec declares over its prepared statement st (see
// Database.Describe): the statement must return a key column, and the
// anchor column when spec names one. Errors are as Prepare's.
func New(spec Spec, st *Statement) (*Check, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	c := &Check{spec: spec, dialect: st.Dialect}
	c.spec.Stages = append([]Stage(nil), spec.Stages...)
	s := &shape{columns: append([]Column(nil), st.Columns...), zone: st.Zone, keysType: st.KeysType, keyCol: -1, anchorCol: -1}
	var errs []error
	seen := make(map[string]bool)
	names := make([]string, 0, len(st.Columns))
	for i, col := range st.Columns {
		names = append(names, col.Name)
		if seen[col.Name] {
			errs = append(errs, &FieldError{Field: "query", Err: fmt.Errorf("the query returns two columns named %q: "+
				"each column names a field of the events' payload, so give one of them another name (AS …)", col.Name)})
		}
		seen[col.Name] = true
		switch col.Name {
		case KeyColumn:
			s.keyCol = i
		case spec.Anchor:
			s.anchorCol = i
		}
	}
	if s.keyCol < 0 {
		errs = append(errs, &FieldError{Field: "query", Err: fmt.Errorf("the query returns no column named key (it returns %s): "+
			"return the entity's key as key, e.g. SELECT id AS key, …", columnList(names))})
	}
	if spec.Anchor != "" {
		switch {
		case s.anchorCol < 0:
			errs = append(errs, &FieldError{Field: "anchor", Err: fmt.Errorf("the query returns no column named %q (it returns %s): "+
				"name a timestamp column the query returns, or leave anchor out to count the stages from the job's first check",
				spec.Anchor, columnList(names))})
		case st.Columns[s.anchorCol].TypeKnown && !st.Columns[s.anchorCol].Time:
			errs = append(errs, &FieldError{Field: "anchor", Err: fmt.Errorf("column %q is %s, not a point in time: "+
				"the anchor must be a date, timestamp or timestamp with time zone (cast it in the query)",
				spec.Anchor, st.Columns[s.anchorCol].Type)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.shape.Store(s)
	return c, nil
}

func columnList(names []string) string {
	if len(names) == 0 {
		return "no columns"
	}
	return strings.Join(names, ", ")
}

// Spec returns the check's declaration.
func (c *Check) Spec() Spec { return c.spec }

// Columns returns the result columns of the check's query.
func (c *Check) Columns() []Column { return append([]Column(nil), c.shape.Load().columns...) }

// Register adds the check to reg as a batch check, with its awaits, sinks,
// guards and batch size.
func (c *Check) Register(reg *checks.Registry) error {
	return reg.RegisterBatch(c.spec.Name, c.Batch, c.spec.Opts())
}

// KeysArg returns the due keys as the dialect's queries read $1: a
// PostgreSQL array literal, or a JSON array of strings for SQLite.
func KeysArg(d Dialect, keys []string) string {
	var b strings.Builder
	if d == SQLite {
		enc, _ := json.Marshal(append([]string{}, keys...)) // strings always encode
		return string(enc)
	}
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range k {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// canonicalInt reports whether k is an integer in its plain decimal form,
// as PostgreSQL writes one back: no sign but a minus, no leading zero or
// blank.
func canonicalInt(k string) bool {
	v, err := strconv.ParseInt(k, 10, 64)
	return err == nil && strconv.FormatInt(v, 10) == k
}

// found is a due key the query returned.
type found struct {
	anchored bool // the query returns an anchor column: anchor is its value
	anchor   any
	payload  json.RawMessage
}

// Batch is the check's checks.BatchFunc: one query for the jobs, then each
// job's stages (see the package documentation).
func (c *Check) Batch(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
	results := make([]checks.Result, len(jobs))
	due := make(map[string]int, len(jobs))
	keys := make([]string, 0, len(jobs))
	keysType := c.shape.Load().keysType
	for i, j := range jobs {
		if j.Entity != c.spec.Entity {
			results[i].Err = checks.Permanent(fmt.Errorf("check %s watches entity %s: a job of entity %s cannot be checked by it "+
				"(schedule it with a check of its own)", c.spec.Name, c.spec.Entity, j.Entity))
			continue
		}
		if keysType != "" && !canonicalInt(j.Key) {
			// PostgreSQL would read "007" as 7: the job would take key 7's
			// row, or, with 7 not due, fail as returning a key not asked
			// for; with 7 due in the same batch, 007 found no row and
			// ended done, silently (found by a trial of declared checks).
			results[i].Err = checks.Permanent(fmt.Errorf("key %q is not an integer written as the query's $1 (%s) writes it back: "+
				"it would be read as another key's number; schedule the job with the key in its plain decimal form", j.Key, keysType))
			continue
		}
		due[j.Key] = i
		keys = append(keys, j.Key)
	}
	if len(keys) == 0 {
		return results, nil
	}
	rows, err := c.queryApart(ctx, jobs[0].Tx, keys, due, results)
	if err != nil {
		return nil, err
	}
	for i, j := range jobs {
		if results[i].Err != nil {
			continue
		}
		f := rows[i]
		if f == nil {
			continue // not there yet no more: done
		}
		next, err := c.stages(ctx, j, f)
		if err != nil {
			var je jobError
			if errors.As(err, &je) {
				results[i].Err = je.err
				continue
			}
			return nil, err
		}
		results[i].Next = next
	}
	return results, nil
}

// savepoint names the savepoint queryApart runs each query in.
const savepoint = "prescient_sqlcheck"

// queryApart runs the query for keys in a savepoint and returns what it
// found of each job (see query). When the query fails, it runs it again for
// each half of the keys, and so on, so that a key the query cannot take (one
// that does not cast to the column's type, or that comes back in another
// spelling) fails its own job, with the query's error in results, and not
// the jobs that merely shared its batch. A query that fails whatever the
// keys would cost a query per key this way: after queryTries queries the
// keys left fail together, as the batch did. A query stopped by the
// runtime guard fails the batch.
func (c *Check) queryApart(ctx context.Context, tx checks.Tx, keys []string, due map[string]int, results []checks.Result) ([]*found, error) {
	out := make([]*found, len(results))
	tries := queryTries(len(keys))
	replanned := false
	var run func(keys []string) error
	run = func(keys []string) error {
		tries--
		if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
			return fmt.Errorf("query: %w", err)
		}
		part := due
		if len(keys) < len(due) {
			part = make(map[string]int, len(keys))
			for _, k := range keys {
				part[k] = due[k]
			}
		}
		got, qerr := c.query(ctx, tx, keys, part, len(results))
		if qerr == nil {
			for i, f := range got {
				if f != nil {
					out[i] = f
				}
			}
			if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint); err != nil {
				return fmt.Errorf("query: %w", err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); err != nil {
			return errors.Join(qerr, err)
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint); err != nil {
			return errors.Join(qerr, err)
		}
		switch {
		case ctx.Err() != nil:
			return qerr
		case stalePlan(qerr) && !replanned:
			// A connection that ran the query before its columns changed
			// refuses it once, and prepares it afresh for the next run.
			replanned = true
			return run(keys)
		case len(keys) == 1 || tries < 2:
			for _, k := range keys {
				results[due[k]].Err = qerr
			}
			return nil
		}
		half := len(keys) / 2
		if err := run(keys[:half]); err != nil {
			return err
		}
		return run(keys[half:])
	}
	if err := run(keys); err != nil {
		return nil, err
	}
	return out, nil
}

// columnsChanged is a result whose columns are not those of the shape it
// was read with (their types, PostgreSQL's OIDs, where the store says
// them): the check reads each column as it was prepared, so a timestamp
// retyped timestamptz since would have its stages fire hours off, and a
// column added under SELECT * every row fail to scan (found by a trial of
// declared checks).
type columnsChanged struct{ err error }

func (e *columnsChanged) Error() string { return e.err.Error() }

// sameColumns returns a *columnsChanged when oids are not the columns of s.
func (s *shape) sameColumns(oids []uint32) error {
	if oids == nil {
		return nil
	}
	if len(oids) != len(s.columns) {
		return &columnsChanged{fmt.Errorf("query: it returns %d column(s), and %d when it was prepared (a column added or dropped since, "+
			"under SELECT *?)", len(oids), len(s.columns))}
	}
	for i, oid := range oids {
		if col := s.columns[i]; col.OID != 0 && oid != col.OID {
			return &columnsChanged{fmt.Errorf("query: its column %s is no longer of type %s (now type OID %d): the table changed since "+
				"it was prepared", col.Name, col.Type, oid)}
		}
	}
	return nil
}

// reprepare prepares the query again after a call of shape old found its
// columns changed (a column retyped, added or dropped under SELECT *, by
// a migration while the servers run), so that the check reads them as they
// are now: its jobs go on instead of failing until the servers restart. A
// query that no longer fits the check (no key column, an anchor that is no
// longer a time) keeps the shape it had, and the call fails saying why.
// Calls that meet the change at once prepare it once.
func (c *Check) reprepare(ctx context.Context, old *shape, changed error) error {
	if c.db == nil {
		return fmt.Errorf("%w: prepare the check again (sqlcheck.Prepare) to read its columns as they are now", changed)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shape.Load() != old {
		return nil // prepared again meanwhile
	}
	st, err := c.db.Describe(ctx, c.spec.Query)
	if err != nil {
		return fmt.Errorf("%w; preparing it again failed: %w", changed, err)
	}
	n, err := New(c.spec, st)
	if err != nil {
		return fmt.Errorf("%w, and the check no longer fits its columns as they are now (mend the table, and its jobs' retries read it "+
			"again; or change the declaration and restart the servers): %w", changed, err)
	}
	c.shape.Store(n.shape.Load())
	return nil
}

// stalePlan reports whether err is PostgreSQL's refusal of a statement a
// connection prepared before the query's result columns changed.
// A check's statements run through the store's transaction, whose errors
// are *postgres.ServerError.
func stalePlan(err error) bool {
	var se *postgres.ServerError
	return errors.As(err, &se) && se.Code == "0A000" && strings.Contains(se.Error(), "cached plan must not change result type")
}

// queryTries bounds the queries queryApart runs for n keys: enough to find
// a couple of bad keys by halving, far fewer than n for a large batch.
func queryTries(n int) int {
	return 4*bits.Len(uint(n)) + 4
}

// jobError fails one job, not the batch.
type jobError struct{ err error }

func (e jobError) Error() string { return e.err.Error() }

// query runs the check's query for keys and returns what it found of each
// job, by the jobs' index in due; nil where the key was not returned. The
// rows are read to the end and closed before it returns: the transaction
// runs one statement at a time, and the events are written after. When the
// query's columns changed since it was prepared, it is prepared again and
// run once more (see reprepare).
func (c *Check) query(ctx context.Context, tx checks.Tx, keys []string, due map[string]int, n int) ([]*found, error) {
	s := c.shape.Load()
	out, err := c.queryAs(ctx, tx, s, keys, due, n)
	var changed *columnsChanged
	if !errors.As(err, &changed) {
		return out, err
	}
	if err := c.reprepare(ctx, s, changed); err != nil {
		return nil, err
	}
	return c.queryAs(ctx, tx, c.shape.Load(), keys, due, n)
}

// queryAs is query with its rows read as shape s says.
func (c *Check) queryAs(ctx context.Context, tx checks.Tx, s *shape, keys []string, due map[string]int, n int) ([]*found, error) {
	rows, err := tx.Query(ctx, c.spec.Query, KeysArg(c.dialect, keys))
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	typed, _ := rows.(interface{ ColumnOIDs() []uint32 })
	out := make([]*found, n)
	vals := make([]any, len(s.columns))
	dest := make([]any, len(s.columns))
	raws := make([]json.RawMessage, len(s.columns))
	for i, col := range s.columns {
		dest[i] = &vals[i]
		if col.JSON { // as written; a key is read as ->> prints it (keyText)
			dest[i] = &raws[i] // as written: decoded, its numbers would pass through float64
		}
	}
	for first := true; rows.Next(); first = false {
		if first && typed != nil {
			// Known once a row came (a pipelined query's columns may not
			// be before).
			if err := s.sameColumns(typed.ColumnOIDs()); err != nil {
				return nil, err
			}
		}
		clear(vals)
		clear(raws)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("query: read a row: %w (if the query's columns changed since this server started, "+
				"a column added, dropped or retyped under SELECT *, restart the servers: they read its columns at start)", err)
		}
		for i, col := range s.columns {
			switch {
			case col.JSON && raws[i] != nil:
				vals[i] = raws[i]
			case col.Zoneless && s.zone != nil:
				if t, ok := vals[i].(time.Time); ok {
					vals[i] = wallTime(t, s.zone)
				}
			}
		}
		key, ok := keyText(vals[s.keyCol])
		if s.columns[s.keyCol].Padded {
			key = strings.TrimRight(key, " ")
		}
		if !ok {
			return nil, fmt.Errorf("query returned a NULL key: the key column must hold the entity's key")
		}
		i, ok := due[key]
		if !ok {
			return nil, fmt.Errorf("query returned key %q, which is not one of the %d due key(s) passed in $1: "+
				"it must return only rows whose key is in $1, as text equal to the key", key, len(keys))
		}
		if out[i] != nil {
			return nil, fmt.Errorf("query returned key %q twice: it must return one row per key (look at its joins)", key)
		}
		f := &found{payload: s.payload(vals)}
		if s.anchorCol >= 0 {
			f.anchored, f.anchor = true, vals[s.anchorCol]
		}
		out[i] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	return out, nil
}

// stages raises the stages of job due by its slot and returns its next
// check: the next stage's time, or zero after the last. A jobError fails
// the job alone.
func (c *Check) stages(ctx context.Context, job *checks.Job, f *found) (time.Time, error) {
	anchor := job.FirstCheckAt
	if f.anchored {
		t, err := anchorTime(f.anchor)
		if err != nil {
			return time.Time{}, jobError{fmt.Errorf("anchor column %s of %s %s: %w", c.spec.Anchor, job.Entity, job.Key, err)}
		}
		anchor = t
	}
	if len(f.payload) > 0 {
		if err := checks.ValidatePayload(f.payload); err != nil {
			return time.Time{}, jobError{fmt.Errorf("the query's columns for %s %s make the events' payload: %w", job.Entity, job.Key, err)}
		}
	}
	for _, st := range c.spec.Stages {
		at := anchor.Add(st.After)
		if at.After(job.Slot) {
			if h := job.Horizon; h > 0 && at.Sub(job.Slot) > h {
				// Further than the guard lets a check ask (a stage far
				// after its anchor, an anchor ahead): look again at the
				// horizon, reading the anchor afresh then.
				return job.Slot.Add(h), nil
			}
			return at, nil
		}
		ev := checks.Event{Name: st.Event, Stage: st.StageName(), Severity: st.Severity, Payload: f.payload}
		if _, err := job.Emit(ctx, ev); err != nil {
			return time.Time{}, fmt.Errorf("raise %s (stage %s) for %s %s: %w", st.Event, ev.Stage, job.Entity, job.Key, err)
		}
	}
	return time.Time{}, nil
}

// payload is the JSON object of the row's columns other than the key, in
// the query's order; nil when there are none.
func (s *shape) payload(vals []any) json.RawMessage {
	if len(s.columns) < 2 {
		return nil
	}
	var b []byte
	b = append(b, '{')
	first := true
	for i, col := range s.columns {
		if i == s.keyCol {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		name, _ := json.Marshal(col.Name)
		b = append(b, name...)
		b = append(b, ':')
		b = append(b, jsonValue(vals[i])...)
	}
	return append(b, '}')
}
