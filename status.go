package prescient

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/slots"
)

// Status is a snapshot for operators: what is pending and when, what is
// overdue, how recent slots went and how jobs finished.
type Status struct {
	Server  string     `json:"server"`
	Now     time.Time  `json:"now"`
	Current time.Time  `json:"current_slot"`
	Grid    slots.Grid `json:"grid"`
	Jobs    *JobStats  `json:"jobs"`
	// Recent lists the latest ledger rows, newest slot first, each with
	// its state (JudgeSlots, against the servers' latest heartbeats and
	// this client's Config.ServerTimeout).
	Recent []*RecentSlot `json:"recent_slots"`
	// Incomplete counts the slots of Recent left incomplete (JudgeSlots),
	// the slot in progress included; the oldest slot's rows are not
	// counted when another server's row of it may lie past Recent.
	Incomplete int `json:"incomplete_slots"`
	// Outcomes counts history records per outcome over the last day.
	Outcomes map[history.Outcome]int `json:"outcomes_24h"`
	// Servers lists the registered servers, each live or not by its own
	// timeout (Server.Live, this client's Config.ServerTimeout for a
	// server that recorded none).
	Servers []*ServerStatus `json:"servers"`
	// RunBy names, per check with pending jobs, the live servers that run
	// it by their latest heartbeats (Server.Checks): empty when none does,
	// and its jobs wait. Nil while a live server does not say which checks
	// it runs (an older prescient).
	RunBy map[string][]string `json:"run_by,omitempty"`
	// FiredBy names, per slot of Jobs.Upcoming (in its order), the live
	// servers whose latest heartbeats list its position: empty when none
	// does, and its jobs wait for a sweep.
	FiredBy [][]string `json:"upcoming_fired_by"`
	// Deliveries counts, per sink, the pending and dead deliveries of
	// events and those delivered over the last day.
	Deliveries map[string]*DeliveryCount `json:"deliveries"`
}

// ServerStatus is a registered server and whether it is live.
type ServerStatus struct {
	*Server
	Alive bool `json:"live"`
}

// RecentSlot is a ledger row with its state.
type RecentSlot struct {
	*SlotRecord
	State SlotState `json:"state"`
}

// StatusOpts tunes Status. Zero values take defaults.
type StatusOpts struct {
	// Upcoming caps the upcoming slots listed (default 10).
	Upcoming int
	// Recent caps the ledger rows listed (default 10).
	Recent int
}

// Status reads a snapshot of the pending table, the ledger and history. Jobs
// an older version stored beyond the supported range are listed in one
// upcoming slot at slots.MaxTime (see slots.Clamp), which no valid check time
// equals.
func (c *Client) Status(ctx context.Context, opts *StatusOpts) (*Status, error) {
	o := StatusOpts{Upcoming: 10, Recent: 10}
	if opts != nil {
		if opts.Upcoming > 0 {
			o.Upcoming = opts.Upcoming
		}
		if opts.Recent > 0 {
			o.Recent = opts.Recent
		}
	}
	now := c.now()
	st := &Status{Server: c.cfg.Server, Now: now, Current: c.cfg.Grid.Floor(now), Grid: c.cfg.Grid}
	var err error
	if st.Jobs, err = c.drv.JobStats(ctx, &driver.JobStatsParams{Current: st.Current, Upcoming: o.Upcoming}); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	st.Jobs.Upcoming = clampLoads(st.Jobs.Upcoming)
	st.Jobs.OldestOverdue = slots.Clamp(st.Jobs.OldestOverdue)
	recs, cut, err := c.LatestSlots(ctx, time.Time{}, o.Recent)
	if err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	if st.Outcomes, err = c.drv.HistoryCounts(ctx, now.Add(-24*time.Hour)); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	servers, err := c.drv.ServerList(ctx)
	if err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	st.Servers = make([]*ServerStatus, len(servers))
	for i, s := range servers {
		st.Servers[i] = &ServerStatus{Server: s, Alive: s.Live(now, c.cfg.ServerTimeout)}
	}
	st.RunBy = runBy(st.Servers, st.Jobs.ByCheck)
	st.FiredBy = make([][]string, len(st.Jobs.Upcoming))
	for i, l := range st.Jobs.Upcoming {
		p := c.cfg.Grid.Position(l.Slot)
		st.FiredBy[i] = []string{}
		for _, s := range st.Servers {
			if s.Alive && slices.Contains(s.Positions, p) {
				st.FiredBy[i] = append(st.FiredBy[i], s.Name)
			}
		}
	}
	var states []SlotState
	states, st.Incomplete = JudgeSlots(recs, cut, servers, now, st.Current, c.cfg.ServerTimeout)
	st.Recent = make([]*RecentSlot, len(recs))
	for i, r := range recs {
		st.Recent[i] = &RecentSlot{SlotRecord: r, State: states[i]}
	}
	if st.Deliveries, err = c.drv.DeliveryCounts(ctx, now.Add(-24*time.Hour)); err != nil {
		return nil, fmt.Errorf("prescient: status: %w", err)
	}
	return st, nil
}

// runBy is Status.RunBy: per check of byCheck, the live servers that run
// it; nil when a live server does not say.
func runBy(servers []*ServerStatus, byCheck map[string]int) map[string][]string {
	for _, s := range servers {
		if s.Alive && s.Checks == nil {
			return nil
		}
	}
	out := make(map[string][]string, len(byCheck))
	for check := range byCheck {
		by := []string{}
		for _, s := range servers {
			if s.Alive && slices.Contains(s.Checks, check) {
				by = append(by, s.Name)
			}
		}
		out[check] = by
	}
	return out
}

// SlotsParams selects rows of the slot ledger: slots in [Since, Until) (zero
// bounds are open), newest first, at most Limit (0 means 100, at most
// SlotsLimitMax).
type SlotsParams = driver.SlotListParams

// SlotsLimitMax is the largest SlotsParams.Limit.
const SlotsLimitMax = 100_000

// Slots reads the slot ledger: one row per slot and server that fired it,
// adding up every firing of the slot by that server (a slot fired again by a
// sweep or after a restart keeps one row), with when it started and finished
// (zero while incomplete), its counts and its worst lateness. p may be nil for
// the latest 100 rows.
func (c *Client) Slots(ctx context.Context, p *SlotsParams) ([]*SlotRecord, error) {
	if p == nil {
		p = &SlotsParams{}
	}
	switch {
	case p.Limit < 0 || p.Limit > SlotsLimitMax:
		return nil, fmt.Errorf("prescient: read the slot ledger: limit %d is out of range [1, %d] (0 means 100)", p.Limit, SlotsLimitMax)
	case !p.Since.IsZero() && !p.Until.IsZero() && !p.Since.Before(p.Until):
		return nil, fmt.Errorf("prescient: read the slot ledger: since %s is not before until %s",
			p.Since.Format(time.RFC3339Nano), p.Until.Format(time.RFC3339Nano))
	}
	recs, err := c.drv.SlotList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("prescient: read the slot ledger: %w", err)
	}
	return recs, nil
}

// LatestSlots returns the latest limit ledger rows of slots before until
// (every slot when until is zero), newest first, as Slots does, and whether
// they end inside the oldest slot's rows: another server's row of that slot
// lies beyond the limit (or may, when limit is SlotsLimitMax and no row more
// can be read), so the oldest slot cannot be judged complete or not from
// them. Status readers (metrics, the status page) count incomplete slots
// this way.
func (c *Client) LatestSlots(ctx context.Context, until time.Time, limit int) (recs []*SlotRecord, cut bool, err error) {
	if limit <= 0 || limit > SlotsLimitMax {
		return nil, false, fmt.Errorf("prescient: read the slot ledger: limit %d is out of range [1, %d]", limit, SlotsLimitMax)
	}
	n := limit
	if n < SlotsLimitMax {
		n++ // one row more tells whether the oldest slot goes on
	}
	recs, err = c.Slots(ctx, &SlotsParams{Until: until, Limit: n})
	switch {
	case err != nil:
		return nil, false, err
	case len(recs) > limit:
		return recs[:limit], recs[limit].Slot.Equal(recs[limit-1].Slot), nil
	}
	// Every row there is, unless the limit is SlotsLimitMax and reached:
	// then no row more could be looked at.
	return recs, n == limit && len(recs) == limit, nil
}

// clampLoads reads the slots of upcoming loads (soonest first) through
// slots.Clamp, adding up the loads of the slots beyond the supported range
// into one at slots.MaxTime.
func clampLoads(loads []driver.SlotLoad) []driver.SlotLoad {
	out := loads[:0]
	for _, l := range loads {
		l.Slot = slots.Clamp(l.Slot)
		if n := len(out); n > 0 && out[n-1].Slot.Equal(l.Slot) {
			out[n-1].Jobs += l.Jobs
			continue
		}
		out = append(out, l)
	}
	return out
}
