package statuspage

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// base is what every page's layout shows.
type base struct {
	Title   string
	Nav     string // the page's entry in the navigation: "overview" or "history"
	Server  string
	Grid    string
	Now     time.Time
	Refresh int // seconds between reloads; 0: none
	// Paused says the viewer turned the overview's reloading off.
	Paused   bool
	NotReady bool
	// Root leads from the page back to the handler's root ("./", or
	// "../../" for a 404 at /a/b/c), for relative links that also work
	// under a prefix.
	Root string
}

func (p *page) base(r *http.Request, title, nav string) base {
	cfg := p.client.Config()
	return base{
		Title:    title,
		Nav:      nav,
		Server:   cfg.Server,
		Grid:     cfg.Grid.String(),
		Now:      cfg.Now().UTC(),
		NotReady: p.client.Ready() != nil,
		Root:     root(r.URL.Path),
	}
}

// root is the relative path from path to the handler's root.
func root(path string) string {
	if n := strings.Count(strings.TrimPrefix(path, "/"), "/"); n > 0 {
		return strings.Repeat("../", n)
	}
	return "./"
}

// overviewPage is the data of "/".
type overviewPage struct {
	base
	// Counts is nil when they could not be read; CountsErr says so.
	Counts    *countsView
	CountsErr string

	Current time.Time
	// Upcoming lists the slots with jobs from the one in progress on,
	// latest first (the timeline reads down towards now); Fired the ledger
	// rows, newest first.
	Upcoming []slotRow
	Fired    []slotRow
	FiredErr string
	Ledger   int // ledger rows asked for
	// Incomplete counts the slots among Fired that no server finished nor
	// fires now (prescient.JudgeSlots), as prescient_slots_incomplete does:
	// a slot one server died in and another fired to the end is not (its
	// first row is "superseded").
	Incomplete    int
	ServerTimeout time.Duration
	Servers       []serverRow
	ServerErr     string
	Checks        []checkRow
	Unknown       []checkRow
	// CatalogErr is set when the catalog could not be read, so that no
	// check can be called unknown.
	CatalogErr string
	Recent     []*history.Record
	RecentErr  string
	RecentMore bool
	// Deliveries are the events' deliveries per sink, as of the counts:
	// pending, delivered over the last day, dead (Status.Deliveries).
	Deliveries []deliveryRow
}

// deliveryRow is one sink's deliveries.
type deliveryRow struct {
	Sink                     string
	Pending, Delivered, Dead int
}

// countsView is what the page shows of a reading of the counts.
type countsView struct {
	AsOf          time.Time
	CacheFor      time.Duration
	Pending       int
	Overdue       int
	OldestOverdue time.Time
	UnknownJobs   int
	Finished      int
	Outcomes      []outcomeCount
}

// outcomeCount is a number of jobs that ended with one outcome.
type outcomeCount struct {
	Outcome history.Outcome
	N       int
}

// slotRow is one line of the timeline.
type slotRow struct {
	Slot     time.Time
	Position int
	// State is "upcoming", "now" (the slot in progress), "done" (fired and
	// finished), "running" (being fired by its live server: the slot in
	// progress, or one whose firing runs past its slot's end),
	// "superseded" (not finished by its server, which died, stopped or lost
	// the database in it, and done or running on another) or "incomplete"
	// (fired and not finished by any server): prescient.SlotState.
	State string
	Jobs  int
	Bar   int // 0..20, the jobs against the largest on the timeline
	// Upcoming rows: the live servers that fire the slot's position.
	Owners []string
	// Fired rows: the ledger's figures.
	Server      string
	Kind        string
	Lag         time.Duration
	Took        time.Duration
	Finished    bool
	Rescheduled int
	Failures    int
	UnknownJobs int
	Outcomes    []outcomeCount
}

// serverRow is one registered server.
type serverRow struct {
	Name        string
	StartedAt   time.Time
	HeartbeatAt time.Time
	Age         time.Duration
	Gone        bool
	Self        bool
	Positions   string
	Count       int
}

// checkRow is one check that has pending jobs or is in the catalog.
type checkRow struct {
	Name    string
	Pending int // -1: the counts could not be read
	Bar     int
	Awaits  []string
	// InCatalog: some server registered the check; Here: this server runs
	// it; Seen: due jobs this server found in its last slot with any and
	// does not know (Client.UnknownChecks).
	InCatalog bool
	Here      bool
	Seen      int
	// NoCatalog: the catalog could not be read, so InCatalog says nothing.
	NoCatalog bool
	// RunBy are the live servers whose latest heartbeat lists the check;
	// NoneRuns: there are live servers, each heartbeat says which checks
	// its server runs, and none lists this one.
	RunBy    []string
	NoneRuns bool
}

func (p *page) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := p.readCtx(r)
	defer cancel()
	cfg := p.client.Config()
	d := &overviewPage{base: p.base(r, "Overview", "overview")}
	if p.opts.Refresh > 0 {
		d.Refresh = max(1, int(p.opts.Refresh/time.Second))
	}
	if r.URL.Query().Get("refresh") == "0" {
		d.Paused = true
		d.Refresh = 0
	}
	d.Current = cfg.Grid.Floor(d.Now)
	d.Ledger = p.opts.Fired
	d.ServerTimeout = cfg.ServerTimeout

	c := p.readCounts(ctx)
	var byCheck map[string]int
	if c.err != nil {
		d.CountsErr = p.failed(r, "the counts of pending jobs and history", c.err)
	} else {
		st := c.status
		cv := &countsView{AsOf: c.asOf, CacheFor: p.opts.CacheFor, Pending: st.Jobs.Pending,
			Overdue: st.Jobs.Overdue, OldestOverdue: st.Jobs.OldestOverdue}
		for _, o := range history.Outcomes {
			if n := st.Outcomes[o]; n > 0 {
				cv.Outcomes = append(cv.Outcomes, outcomeCount{o, n})
				cv.Finished += n
			}
		}
		d.Counts = cv
		byCheck = st.Jobs.ByCheck
		for sink, n := range st.Deliveries {
			d.Deliveries = append(d.Deliveries, deliveryRow{sink, n.Pending, n.Delivered, n.Dead})
		}
		slices.SortFunc(d.Deliveries, func(a, b deliveryRow) int { return cmp.Compare(a.Sink, b.Sink) })
		d.Upcoming = p.upcoming(st, d.Current)
	}

	servers, err := p.client.Store().Driver().ServerList(ctx)
	if err != nil {
		d.ServerErr = p.failed(r, "the servers", err)
	}
	live := make(map[string]bool)
	for _, s := range servers {
		age := d.Now.Sub(s.HeartbeatAt)
		row := serverRow{Name: s.Name, StartedAt: s.StartedAt, HeartbeatAt: s.HeartbeatAt, Age: age,
			Gone: !s.Live(d.Now, cfg.ServerTimeout), Self: s.Name == cfg.Server,
			Positions: ranges(s.Positions), Count: len(s.Positions)}
		live[s.Name] = !row.Gone
		d.Servers = append(d.Servers, row)
	}
	for i := range d.Upcoming {
		row := &d.Upcoming[i]
		for _, s := range servers {
			if live[s.Name] && slices.Contains(s.Positions, row.Position) {
				row.Owners = append(row.Owners, s.Name)
			}
		}
	}

	ledger, cut, err := p.client.LatestSlots(ctx, time.Time{}, p.opts.Fired)
	if err != nil {
		d.FiredErr = p.failed(r, "the slot ledger", err)
	}
	states, incomplete := prescient.JudgeSlots(ledger, cut, servers, d.Now, d.Current, cfg.ServerTimeout)
	for i, rec := range ledger {
		row := slotRow{Slot: rec.Slot, Position: cfg.Grid.Position(rec.Slot), Jobs: rec.Checked,
			Server: rec.Server, Kind: rec.Kind, Lag: rec.StartedAt.Sub(rec.Slot), Finished: rec.Complete(),
			Rescheduled: rec.Rescheduled, Failures: rec.Failures, UnknownJobs: rec.Unknown,
			Outcomes: outcomeList(rec.Outcomes), State: string(states[i])}
		if rec.Complete() {
			row.Took = rec.Took
		}
		d.Fired = append(d.Fired, row)
	}
	d.Incomplete = incomplete
	bars(d.Fired)

	catalog, err := p.client.Store().Driver().CatalogList(ctx)
	if err != nil {
		d.CatalogErr = p.failed(r, "the check catalog", err)
	}
	d.Checks, d.Unknown = p.checkRows(catalog, err == nil, byCheck, liveServers(servers, d.Now, cfg.ServerTimeout, d.ServerErr == ""))
	if d.Counts != nil {
		for _, u := range d.Unknown {
			d.Counts.UnknownJobs += max(u.Pending, 0)
		}
	}

	recent, err := p.client.History(ctx, history.Filter{Limit: p.opts.Recent + 1, NoPayload: true})
	if err != nil {
		d.RecentErr = p.failed(r, "history", err)
	}
	if len(recent) > p.opts.Recent {
		recent, d.RecentMore = recent[:p.opts.Recent], true
	}
	d.Recent = recent
	p.render(w, r, http.StatusOK, "overview", d)
}

// upcoming turns the counts' upcoming loads into timeline rows, latest
// first.
func (p *page) upcoming(st *prescient.Status, current time.Time) []slotRow {
	grid := p.client.Config().Grid
	var rows []slotRow
	for _, l := range st.Jobs.Upcoming {
		if l.Slot.Before(current) {
			continue // counts read before the slot in progress began
		}
		state := "upcoming"
		if l.Slot.Equal(current) {
			state = "now"
		}
		rows = append(rows, slotRow{Slot: l.Slot, Position: grid.Position(l.Slot), State: state, Jobs: l.Jobs})
	}
	bars(rows)
	slices.Reverse(rows)
	return rows
}

// liveServers returns the live servers among servers, or nil when any of
// them does not say which checks it runs (an older prescient) or the list
// could not be read (ok false): then no one can say which run a check.
func liveServers(servers []*driver.Server, now time.Time, timeout time.Duration, ok bool) []*driver.Server {
	var live []*driver.Server
	for _, s := range servers {
		if !s.Live(now, timeout) {
			continue
		}
		if s.Checks == nil {
			return nil
		}
		live = append(live, s)
	}
	if !ok {
		return nil
	}
	return live
}

// checkRows lists every check with pending jobs or in the catalog, by name,
// each with the live servers (live, from liveServers) that run it, and
// apart the ones no server knows: pending jobs of a check missing from the
// catalog (no server ever registered it), that no live server runs, or
// that this server found due and has no check for.
func (p *page) checkRows(catalog []driver.CatalogEntry, haveCatalog bool, byCheck map[string]int, live []*driver.Server) (all, unknown []checkRow) {
	rows := make(map[string]*checkRow)
	row := func(name string) *checkRow {
		if r, ok := rows[name]; ok {
			return r
		}
		r := &checkRow{Name: name, Pending: -1, NoCatalog: !haveCatalog}
		if byCheck != nil {
			r.Pending = byCheck[name]
		}
		_, r.Here = p.client.Config().Checks.Lookup(name)
		for _, s := range live {
			if slices.Contains(s.Checks, name) {
				r.RunBy = append(r.RunBy, s.Name)
			}
		}
		r.NoneRuns = len(live) > 0 && len(r.RunBy) == 0
		rows[name] = r
		return r
	}
	for _, e := range catalog {
		r := row(e.Check)
		r.InCatalog = true
		r.Awaits = e.Awaits
	}
	for name := range byCheck {
		row(name)
	}
	for name, n := range p.client.UnknownChecks() {
		row(name).Seen = n
	}
	most := 0
	for _, r := range rows {
		most = max(most, r.Pending)
	}
	for _, r := range rows {
		if r.Pending == 0 && !r.InCatalog && !r.Here {
			// Only seen due once (its jobs cancelled, retired or run
			// elsewhere since): nothing to show.
			continue
		}
		r.Bar = bar(r.Pending, most)
		all = append(all, *r)
		// A name this server found due and has no check for is listed while
		// it has jobs pending (or their count could not be read): once they
		// are cancelled, resolved or run elsewhere, nothing waits on it.
		if ((haveCatalog && !r.InCatalog) || r.Seen > 0 || r.NoneRuns) && r.Pending != 0 {
			unknown = append(unknown, *r)
		}
	}
	byName := func(a, b checkRow) int { return cmp.Compare(a.Name, b.Name) }
	slices.SortFunc(all, byName)
	slices.SortFunc(unknown, byName)
	return all, unknown
}

// outcomeList orders a ledger row's or a reading's outcome counts as
// history.Outcomes does.
func outcomeList(m map[history.Outcome]int) []outcomeCount {
	var out []outcomeCount
	for _, o := range history.Outcomes {
		if n := m[o]; n > 0 {
			out = append(out, outcomeCount{o, n})
		}
	}
	return out
}

// bars sets each row's Bar against the largest Jobs among rows.
func bars(rows []slotRow) {
	most := 0
	for _, r := range rows {
		most = max(most, r.Jobs)
	}
	for i := range rows {
		rows[i].Bar = bar(rows[i].Jobs, most)
	}
}

// bar scales n against most to 0..20 (the stylesheet's bar widths), at
// least 1 for any n > 0.
func bar(n, most int) int {
	if n <= 0 || most <= 0 {
		return 0
	}
	return max(1, int(int64(n)*20/int64(most)))
}
