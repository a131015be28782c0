package statuspage

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/history"
)

// troubleValue is the outcome filter that selects every outcome of a job
// that went wrong (failed and the guards' endings), which an index serves.
const troubleValue = "trouble"

// historyPage is the data of "/history".
type historyPage struct {
	base
	Entity, Key, Check, Outcome string
	Limit                       int
	Limits                      []int
	Outcomes                    []history.Outcome
	// Invalid explains a filter that cannot be run.
	Invalid string
	Err     string
	Records []*history.Record
	// More says more records match than are shown.
	More bool
}

func (p *page) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &historyPage{
		base:     p.base(r, "History", "history"),
		Entity:   strings.TrimSpace(q.Get("entity")),
		Key:      q.Get("key"),
		Check:    strings.TrimSpace(q.Get("check")),
		Outcome:  q.Get("outcome"),
		Limit:    HistoryLimitDefault,
		Limits:   []int{HistoryLimitDefault, 200, HistoryLimitMax},
		Outcomes: history.Outcomes,
	}
	f := history.Filter{Entity: d.Entity, Key: d.Key, Check: d.Check}
	var problems []string
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > HistoryLimitMax {
			problems = append(problems, "limit "+strconv.Quote(v)+" must be a number from 1 to "+strconv.Itoa(HistoryLimitMax)+".")
		} else {
			d.Limit = n
			if !slices.Contains(d.Limits, n) {
				d.Limits = append(d.Limits, n)
				slices.Sort(d.Limits)
			}
		}
	}
	switch d.Outcome {
	case "":
	case troubleValue:
		f.Outcomes = []history.Outcome{history.Failed, history.GuardMaxChecks, history.GuardHorizon, history.GuardPast}
	default:
		o, err := history.ParseOutcome(d.Outcome)
		if err != nil {
			problems = append(problems, "outcome: "+err.Error()+".")
		}
		f.Outcomes = []history.Outcome{o}
	}
	if d.Key != "" && d.Entity == "" {
		problems = append(problems, "A key needs an entity: history is looked up by entity, then key.")
	}
	// A name no job can have is the visitor's mistake, said as such, not
	// a failure of the store (and a warning in the server's log).
	if d.Entity != "" {
		if err := checks.ValidateName("entity", d.Entity); err != nil {
			problems = append(problems, err.Error()+".")
		} else if d.Key != "" {
			if err := checks.ValidateKey(d.Entity, d.Key); err != nil {
				problems = append(problems, err.Error()+".")
			}
		}
	}
	if d.Check != "" {
		if err := checks.ValidateName("check", d.Check); err != nil {
			problems = append(problems, err.Error()+".")
		}
	}
	if len(problems) > 0 {
		d.Invalid = strings.Join(problems, " ")
		p.render(w, r, http.StatusBadRequest, "history", d)
		return
	}
	// One more than shown tells whether more exist. The page shows no
	// payload: a page of 1,000 records read up to 64 MiB of them (found
	// by a security review).
	f.Limit = d.Limit + 1
	f.NoPayload = true
	ctx, cancel := p.readCtx(r)
	defer cancel()
	recs, err := p.client.History(ctx, f)
	if err != nil {
		d.Err = p.failed(r, "history", err)
	}
	if len(recs) > d.Limit {
		recs, d.More = recs[:d.Limit], true
	}
	d.Records = recs
	p.render(w, r, http.StatusOK, "history", d)
}

// jobPage is the data of "/job".
type jobPage struct {
	base
	Entity, Key, Check string
	Invalid            string
	Pending            []*prescient.Job
	PendingErr         string
	PendingMore        bool
	Records            []*history.Record
	HistoryErr         string
	HistoryMore        bool
}

// job shows the pending job (entity, key, check) and its history records,
// or every check of the entity key when check is empty.
func (p *page) job(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &jobPage{base: p.base(r, "Job", ""), Entity: q.Get("entity"), Key: q.Get("key"), Check: q.Get("check")}
	var err error
	switch {
	case d.Entity == "" || d.Key == "":
		d.Invalid = "A job is named by its entity and key (and, optionally, its check): /job?entity=order&key=42&check=order_unshipped."
	case checks.ValidateName("entity", d.Entity) != nil:
		d.Invalid = checks.ValidateName("entity", d.Entity).Error() + "."
	case checks.ValidateKey(d.Entity, d.Key) != nil:
		d.Invalid = checks.ValidateKey(d.Entity, d.Key).Error() + "."
	case d.Check != "" && checks.ValidateName("check", d.Check) != nil:
		d.Invalid = checks.ValidateName("check", d.Check).Error() + "."
	}
	if d.Invalid != "" {
		p.render(w, r, http.StatusBadRequest, "job", d)
		return
	}
	d.Title = d.Entity + " " + d.Key
	if d.Check != "" {
		d.Title += " " + d.Check
	}
	ctx, cancel := p.readCtx(r)
	defer cancel()
	if d.Check != "" {
		var j *prescient.Job
		switch j, err = p.client.Job(ctx, d.Entity, d.Key, d.Check); {
		case err == nil:
			d.Pending = []*prescient.Job{j}
		case errors.Is(err, prescient.ErrNotFound):
			err = nil
		}
	} else {
		d.Pending, err = p.client.Jobs(ctx, prescient.JobsParams{Entity: d.Entity, Key: d.Key, Limit: JobRowsMax + 1})
		if len(d.Pending) > JobRowsMax {
			d.Pending, d.PendingMore = d.Pending[:JobRowsMax], true
		}
	}
	if err != nil {
		d.PendingErr = p.failed(r, "the pending job", err)
	}
	recs, err := p.client.History(ctx, history.Filter{Entity: d.Entity, Key: d.Key, Check: d.Check, Limit: JobRowsMax + 1})
	if err != nil {
		d.HistoryErr = p.failed(r, "the job's history", err)
	}
	if len(recs) > JobRowsMax {
		recs, d.HistoryMore = recs[:JobRowsMax], true
	}
	d.Records = recs
	p.render(w, r, http.StatusOK, "job", d)
}

// errorPage is the data of a page that has nothing but a message.
type errorPage struct {
	base
	Message string
}

func (p *page) errorPage(r *http.Request, title, msg string) *errorPage {
	return &errorPage{base: p.base(r, title, ""), Message: msg}
}
