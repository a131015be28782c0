package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// The validation below is the Go client's, run here first so that an error
// names the field it is about; the client checks everything again.

// identity checks an entity name and key, as every call of the client does.
func identity(entity, key string) error {
	if err := checks.ValidateName("entity", entity); err != nil {
		return badField("entity", err.Error())
	}
	if err := checks.ValidateKey(entity, key); err != nil {
		return badField("key", err.Error())
	}
	return nil
}

// clientMessage is the text of an error of the client, without the
// "prescient: " every one of them begins with.
func clientMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "prescient: ")
}

// scheduleRequest is the body of POST /v1/schedule.
type scheduleRequest struct {
	Entity string `json:"entity" api:"required"`
	Key    string `json:"key" api:"required"`
	Check  string `json:"check" api:"required"`
	// At is an RFC 3339 time; In a Go duration from now. One of them.
	At string `json:"at"`
	In string `json:"in"`
	// Payload is any JSON; null or absent is no payload.
	Payload    json.RawMessage `json:"payload"`
	OnConflict string          `json:"on_conflict"`
}

const scheduleFields = "entity, key, check, at or in, payload and on_conflict"

// schedule is Client.Schedule: 201 and the job when no job (entity, key,
// check) was pending, 200 and the job when one was (moved by replace, left
// as it was by keep).
func (a *api) schedule(ctx context.Context, r *http.Request) (int, any, error) {
	var req scheduleRequest
	if err := decodeBody(r, a.opts.MaxBody, &req, scheduleFields); err != nil {
		return 0, nil, err
	}
	if err := identity(req.Entity, req.Key); err != nil {
		return 0, nil, err
	}
	if err := checks.ValidateName("check", req.Check); err != nil {
		return 0, nil, badField("check", err.Error())
	}
	if !a.opts.AllowUnknownChecks {
		if err := a.knownCheck(ctx, req.Check); err != nil {
			return 0, nil, err
		}
	}
	var (
		at   time.Time
		when = "at" // the field that said when, for an error about the time
	)
	switch {
	case req.At == "" && req.In == "":
		return 0, nil, badField("at", "say when to check: at (an RFC 3339 time, e.g. 2030-06-01T15:04:05Z) or in (a Go duration from now, e.g. 3h)")
	case req.At != "" && req.In != "":
		return 0, nil, badField("in", fmt.Sprintf("at %s and in %s both say when to check: give only one", quote(req.At), quote(req.In)))
	case req.At != "":
		t, err := time.Parse(time.RFC3339, req.At)
		if why := noRealTime(err); why != "" {
			return 0, nil, badField("at", fmt.Sprintf("at %s is no real time: %s", quote(req.At), why))
		}
		if err != nil {
			return 0, nil, badField("at", fmt.Sprintf("at %s is not an RFC 3339 time (want e.g. 2030-06-01T15:04:05Z or 2030-06-01T17:04:05+02:00)", quote(req.At)))
		}
		at = t
	default:
		d, err := time.ParseDuration(req.In)
		if err != nil || d < 0 {
			return 0, nil, badField("in", fmt.Sprintf("in %s is not a Go duration of 0 or more (want e.g. 90s, 15m or 3h30m)", quote(req.In)))
		}
		at, when = a.client.Config().Now().Add(d), "in"
	}
	if err := slots.CheckTime(at); err != nil {
		// The client's check, before a time it reads as "none" (year 1).
		return 0, nil, badField(when, fmt.Sprintf("%s/%s/%s: %v", req.Entity, req.Key, req.Check, err))
	}
	p := prescient.ScheduleParams{Entity: req.Entity, Key: req.Key, Check: req.Check, At: at}
	if len(req.Payload) > 0 && string(req.Payload) != "null" {
		if err := checks.ValidatePayload(req.Payload); err != nil {
			return 0, nil, badField("payload", err.Error())
		}
		p.Payload = req.Payload
	}
	switch rule := prescient.ConflictRule(req.OnConflict); rule {
	case "", prescient.ConflictReplace, prescient.ConflictKeep:
		p.OnConflict = rule
	default:
		return 0, nil, badField("on_conflict", fmt.Sprintf("on_conflict %s is not a conflict rule (want %s or %s)",
			quote(req.OnConflict), prescient.ConflictReplace, prescient.ConflictKeep))
	}
	// Whether this request created the job decides 201 or 200, as the
	// upsert itself says (a lookup before it could be outdated by a check
	// that ended the job meanwhile).
	job, err := a.client.Schedule(ctx, p)
	switch {
	case errors.Is(err, prescient.ErrOutOfRange):
		return 0, nil, badField(when, clientMessage(err))
	case errors.Is(err, prescient.ErrWrongEntity):
		return 0, nil, badField("entity", clientMessage(err))
	case err != nil:
		return 0, nil, err
	case job.Inserted:
		return http.StatusCreated, job, nil
	}
	return http.StatusOK, job, nil
}

// knownCheck refuses a check that neither the client's registry nor the
// check catalog knows (see Opts.AllowUnknownChecks).
func (a *api) knownCheck(ctx context.Context, check string) error {
	err := a.client.KnownCheck(ctx, check)
	var unknown *prescient.UnknownCheckError
	if !errors.As(err, &unknown) {
		return err
	}
	return badField("check", unknown.Error()+": its job would wait for one; check the name, or start a server that runs it first")
}

// cancelRequest is the body of POST /v1/cancel.
type cancelRequest struct {
	Entity string `json:"entity" api:"required"`
	Key    string `json:"key" api:"required"`
	// Check, when left out, cancels every pending check of the entity. An
	// empty or null one is refused: a client that sends the field means one
	// check, and an unset variable (Python's None) must not cancel them all.
	Check optionalString `json:"check"`
}

// optionalString is a JSON string field that tells a field left out (set
// false) from one sent as null (null true) or as a string.
type optionalString struct {
	set, null bool
	s         string
}

func (o *optionalString) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.null = true
		return nil
	}
	return json.Unmarshal(b, &o.s)
}

// cancel is Client.Cancel: {"cancelled": n}, 0 when nothing was pending.
func (a *api) cancel(ctx context.Context, r *http.Request) (int, any, error) {
	var req cancelRequest
	if err := decodeBody(r, a.opts.MaxBody, &req, "entity, key and check (optional: every check of the entity without it)"); err != nil {
		return 0, nil, err
	}
	if err := identity(req.Entity, req.Key); err != nil {
		return 0, nil, err
	}
	check := ""
	switch c := req.Check; {
	case c.null:
		return 0, nil, badField("check", "check is null: name the check to cancel, or leave the field out to cancel every pending check of the entity")
	case c.set && c.s == "":
		return 0, nil, badField("check", "check is empty: name the check to cancel, or leave the field out to cancel every pending check of the entity")
	case c.set:
		if err := checks.ValidateName("check", c.s); err != nil {
			return 0, nil, badField("check", err.Error())
		}
		check = c.s
	}
	n, err := a.client.Cancel(ctx, req.Entity, req.Key, check)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int{"cancelled": n}, nil
}

// resolveRequest is the body of POST /v1/resolve.
type resolveRequest struct {
	Entity string `json:"entity" api:"required"`
	Key    string `json:"key" api:"required"`
	Event  string `json:"event" api:"required"`
}

// resolve is Client.Resolve: {"resolved": n}, 0 when no pending check of
// the entity awaited the event.
func (a *api) resolve(ctx context.Context, r *http.Request) (int, any, error) {
	var req resolveRequest
	if err := decodeBody(r, a.opts.MaxBody, &req, "entity, key and event"); err != nil {
		return 0, nil, err
	}
	if err := identity(req.Entity, req.Key); err != nil {
		return 0, nil, err
	}
	if err := checks.ValidateName("event", req.Event); err != nil {
		return 0, nil, badField("event", err.Error())
	}
	n, err := a.client.Resolve(ctx, req.Entity, req.Key, req.Event)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]int{"resolved": n}, nil
}

// jobs is Client.Jobs of one entity key, every check: {"jobs": [...]},
// soonest due first. None pending is an empty list, not a 404: the entity
// key is not a resource that exists or not, and cancelling or resolving
// nothing is not an error either.
func (a *api) jobs(ctx context.Context, r *http.Request) (int, any, error) {
	if _, err := query(r, nil); err != nil {
		return 0, nil, err
	}
	entity, key := r.PathValue("entity"), r.PathValue("key")
	if err := identity(entity, key); err != nil {
		return 0, nil, err
	}
	// One job per check at most, so JobsLimitMax is every one.
	jobs, err := a.client.Jobs(ctx, prescient.JobsParams{Entity: entity, Key: key, Limit: prescient.JobsLimitMax})
	if err != nil {
		return 0, nil, err
	}
	if jobs == nil {
		jobs = []*prescient.Job{}
	}
	return http.StatusOK, map[string]any{"jobs": jobs}, nil
}

// historyParams are the query parameters GET /v1/history accepts.
var historyParams = []string{"entity", "key", "check", "outcome", "since", "until", "after_at", "after_id", "limit"}

// historyPage is the answer of GET /v1/history.
type historyPage struct {
	Records []*history.Record `json:"records"`
	// More says more records match than were returned; Next is where the
	// next page starts (its after_at and after_id parameters).
	More bool         `json:"more"`
	Next *historyNext `json:"next,omitempty"`
}

// historyNext is the position a next page of history starts after.
type historyNext struct {
	AfterAt time.Time `json:"after_at"`
	AfterID int64     `json:"after_id"`
}

// history is Client.History: {"records": [...], "more": bool, "next":
// {"after_at": ..., "after_id": ...}}, newest first (next only when more
// match). A parameter left out or empty does not filter; outcome may be
// repeated, or list outcomes separated by commas; since and until take an
// RFC 3339 time or a Go duration before now (24h); after_at and after_id,
// both or neither, continue after the record they name, as next gives them;
// limit is 1 to history.LimitMax, default history.LimitDefault.
func (a *api) history(ctx context.Context, r *http.Request) (int, any, error) {
	q, err := query(r, historyParams)
	if err != nil {
		return 0, nil, err
	}
	now := a.client.Config().Now()
	f := history.Filter{Entity: q.Get("entity"), Key: q.Get("key"), Check: q.Get("check")}
	if f.Key != "" && f.Entity == "" {
		return 0, nil, badField("key", fmt.Sprintf("key %s needs entity", quote(f.Key)))
	}
	if f.Entity != "" {
		if err := checks.ValidateName("entity", f.Entity); err != nil {
			return 0, nil, badField("entity", err.Error())
		}
	}
	if f.Key != "" {
		if err := checks.ValidateKey(f.Entity, f.Key); err != nil {
			return 0, nil, badField("key", err.Error())
		}
	}
	if f.Check != "" {
		if err := checks.ValidateName("check", f.Check); err != nil {
			return 0, nil, badField("check", err.Error())
		}
	}
	for _, v := range q["outcome"] {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			o, err := history.ParseOutcome(s)
			if err != nil {
				return 0, nil, badField("outcome", err.Error())
			}
			f.Outcomes = append(f.Outcomes, o)
		}
	}
	if f.Since, err = when("since", q.Get("since"), now); err != nil {
		return 0, nil, err
	}
	if f.Until, err = when("until", q.Get("until"), now); err != nil {
		return 0, nil, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return 0, nil, badField("until", fmt.Sprintf("since %s is not before until %s",
			f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339)))
	}
	atText, idText := q.Get("after_at"), q.Get("after_id")
	switch {
	case atText != "" && idText == "":
		return 0, nil, badField("after_id", "after_at needs after_id: the id of the last record of the previous page, as its next gives it")
	case idText != "" && atText == "":
		return 0, nil, badField("after_at", "after_id needs after_at: the finished_at of that record, as the previous page's next gives it")
	case atText != "":
		if f.AfterAt, err = time.Parse(time.RFC3339Nano, atText); err != nil {
			return 0, nil, badField("after_at", fmt.Sprintf("after_at %s is not an RFC 3339 time (e.g. 2030-06-01T15:04:05.123456Z)", quote(atText)))
		}
		if f.AfterID, err = strconv.ParseInt(idText, 10, 64); err != nil || f.AfterID < 1 {
			return 0, nil, badField("after_id", fmt.Sprintf("after_id %s is not a record's id (a positive whole number)", quote(idText)))
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > history.LimitMax {
			return 0, nil, badField("limit", fmt.Sprintf("limit %s is not a whole number from 1 to %d (default %d)",
				quote(s), history.LimitMax, history.LimitDefault))
		}
		f.Limit = n
	}
	if err := f.Validate(); err != nil {
		return 0, nil, badField("", err.Error())
	}
	// One record more than the limit says whether another page follows.
	limit := f.EffectiveLimit()
	f.Limit = min(limit+1, history.LimitMax)
	recs, err := a.client.History(ctx, f)
	if err != nil {
		return 0, nil, err
	}
	page := &historyPage{Records: recs}
	switch {
	case len(recs) > limit:
		page.Records, page.More = recs[:limit], true
	case len(recs) == history.LimitMax:
		page.More = true // cannot tell: the next page may be empty
	}
	if page.More {
		last := page.Records[len(page.Records)-1]
		page.Next = &historyNext{AfterAt: last.FinishedAt.UTC(), AfterID: last.ID}
	}
	if page.Records == nil {
		page.Records = []*history.Record{}
	}
	return http.StatusOK, page, nil
}

// query parses the query string of r, which may hold only the parameters
// in allowed, each once ("outcome" may repeat).
func query(r *http.Request, allowed []string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badField("", "the query string is not valid: "+err.Error())
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		switch {
		case !slices.Contains(allowed, name) && len(allowed) == 0:
			return nil, badField(name, fmt.Sprintf("unknown query parameter %s (this route takes none)", quote(name)))
		case !slices.Contains(allowed, name):
			return nil, badField(name, fmt.Sprintf("unknown query parameter %s (the parameters are %s)", quote(name), strings.Join(allowed, ", ")))
		case len(q[name]) > 1 && name != "outcome":
			return nil, badField(name, fmt.Sprintf("%s is given %d times: give it once", name, len(q[name])))
		}
	}
	return q, nil
}

// noRealTime says which part of a time written as RFC 3339 says names
// nothing real (2030-02-30: "day out of range"; +25:00), from time.Parse's
// error; "" for any other error.
func noRealTime(err error) string {
	var pe *time.ParseError
	if errors.As(err, &pe) && pe.Message != "" {
		return strings.TrimPrefix(pe.Message, ": ")
	}
	return ""
}

// when reads an RFC 3339 time, or a Go duration meaning that long before
// now, as `prescient history --since` does. Empty is the zero time.
func when(field, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err == nil {
		return t.UTC(), nil
	}
	if why := noRealTime(err); why != "" {
		return time.Time{}, badField(field, fmt.Sprintf("%s %s is no real time: %s", field, quote(s), why))
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, badField(field, fmt.Sprintf("%s %s is neither an RFC 3339 time (e.g. 2030-06-01T15:04:05Z) nor a Go duration before now (e.g. 24h)", field, quote(s)))
}
