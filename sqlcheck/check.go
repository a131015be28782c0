package sqlcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/checks"
)

// Check is a declared check whose query is prepared: its Batch is the
// checks.BatchFunc the engine runs.
type Check struct {
	spec    Spec
	dialect Dialect
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
	return New(spec, st)
}

// New returns the check spec declares over its prepared statement st (see
// Database.Describe): the statement must return a key column, and the
// anchor column when spec names one. Errors are as Prepare's.
func New(spec Spec, st *Statement) (*Check, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	c := &Check{spec: spec, dialect: st.Dialect, columns: append([]Column(nil), st.Columns...), zone: st.Zone, keysType: st.KeysType,
		keyCol: -1, anchorCol: -1}
	c.spec.Stages = append([]Stage(nil), spec.Stages...)
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
			c.keyCol = i
		case spec.Anchor:
			c.anchorCol = i
		}
	}
	if c.keyCol < 0 {
		errs = append(errs, &FieldError{Field: "query", Err: fmt.Errorf("the query returns no column named key (it returns %s): "+
			"return the entity's key as key, e.g. SELECT id AS key, …", columnList(names))})
	}
	if spec.Anchor != "" {
		switch {
		case c.anchorCol < 0:
			errs = append(errs, &FieldError{Field: "anchor", Err: fmt.Errorf("the query returns no column named %q (it returns %s): "+
				"name a timestamp column the query returns, or leave anchor out to count the stages from the job's first check",
				spec.Anchor, columnList(names))})
		case st.Columns[c.anchorCol].TypeKnown && !st.Columns[c.anchorCol].Time:
			errs = append(errs, &FieldError{Field: "anchor", Err: fmt.Errorf("column %q is %s, not a point in time: "+
				"the anchor must be a date, timestamp or timestamp with time zone (cast it in the query)",
				spec.Anchor, st.Columns[c.anchorCol].Type)})
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
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
func (c *Check) Columns() []Column { return append([]Column(nil), c.columns...) }

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
	anchor  any
	payload json.RawMessage
}

// Batch is the check's checks.BatchFunc: one query for the jobs, then each
// job's stages (see the package documentation).
func (c *Check) Batch(ctx context.Context, jobs []*checks.Job) ([]checks.Result, error) {
	results := make([]checks.Result, len(jobs))
	due := make(map[string]int, len(jobs))
	keys := make([]string, 0, len(jobs))
	for i, j := range jobs {
		if j.Entity != c.spec.Entity {
			results[i].Err = fmt.Errorf("check %s watches entity %s: a job of entity %s cannot be checked by it "+
				"(schedule it with a check of its own)", c.spec.Name, c.spec.Entity, j.Entity)
			continue
		}
		if c.keysType != "" && !canonicalInt(j.Key) {
			// PostgreSQL would read "007" as 7: the job would take key 7's
			// row, or, with 7 not due, fail as returning a key not asked
			// for; with 7 due in the same batch, 007 found no row and
			// ended done, silently (found by a trial of declared checks).
			results[i].Err = fmt.Errorf("key %q is not an integer written as the query's $1 (%s) writes it back: "+
				"it would be read as another key's number; schedule the job with the key in its plain decimal form", j.Key, c.keysType)
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

// sameColumns refuses a result whose columns are not those the query had
// when the server prepared it (their types, PostgreSQL's OIDs, where the
// store says them): the check reads each column as it was then, so a
// timestamp retyped timestamptz since would have its stages fire hours off,
// and a column added under SELECT * every row fail to scan (found by a
// trial of declared checks).
func (c *Check) sameColumns(oids []uint32) error {
	if oids == nil {
		return nil
	}
	restart := "restart the servers, which prepare a declared check's query at start; its jobs fail until then"
	if len(oids) != len(c.columns) {
		return fmt.Errorf("query: it returns %d column(s), and %d when this server prepared it (a column added or dropped since, "+
			"under SELECT *?): %s", len(oids), len(c.columns), restart)
	}
	for i, oid := range oids {
		if col := c.columns[i]; col.OID != 0 && oid != col.OID {
			return fmt.Errorf("query: its column %s is no longer of type %s (now type OID %d): the table changed since this server "+
				"prepared it, and reading it as before would be wrong (a timestamp read in another zone): %s", col.Name, col.Type, oid, restart)
		}
	}
	return nil
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
// runs one statement at a time, and the events are written after.
func (c *Check) query(ctx context.Context, tx checks.Tx, keys []string, due map[string]int, n int) ([]*found, error) {
	rows, err := tx.Query(ctx, c.spec.Query, KeysArg(c.dialect, keys))
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	defer rows.Close()
	typed, _ := rows.(interface{ ColumnOIDs() []uint32 })
	out := make([]*found, n)
	vals := make([]any, len(c.columns))
	dest := make([]any, len(c.columns))
	raws := make([]json.RawMessage, len(c.columns))
	for i, col := range c.columns {
		dest[i] = &vals[i]
		if col.JSON { // as written; a key is read as ->> prints it (keyText)
			dest[i] = &raws[i] // as written: decoded, its numbers would pass through float64
		}
	}
	for first := true; rows.Next(); first = false {
		if first && typed != nil {
			// Known once a row came (a pipelined query's columns may not
			// be before).
			if err := c.sameColumns(typed.ColumnOIDs()); err != nil {
				return nil, err
			}
		}
		clear(vals)
		clear(raws)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("query: read a row: %w (if the query's columns changed since this server started, "+
				"a column added, dropped or retyped under SELECT *, restart the servers: they read its columns at start)", err)
		}
		for i, col := range c.columns {
			switch {
			case col.JSON && raws[i] != nil:
				vals[i] = raws[i]
			case col.Zoneless && c.zone != nil:
				if t, ok := vals[i].(time.Time); ok {
					vals[i] = wallTime(t, c.zone)
				}
			}
		}
		key, ok := keyText(vals[c.keyCol])
		if c.columns[c.keyCol].Padded {
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
		f := &found{payload: c.payload(vals)}
		if c.anchorCol >= 0 {
			f.anchor = vals[c.anchorCol]
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
	if c.anchorCol >= 0 {
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
func (c *Check) payload(vals []any) json.RawMessage {
	if len(c.columns) < 2 {
		return nil
	}
	var b []byte
	b = append(b, '{')
	first := true
	for i, col := range c.columns {
		if i == c.keyCol {
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
