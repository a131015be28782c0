package prescient

import "time"

// SlotState is how status readers (Status, the status page, `prescient
// status`, the metrics' incomplete slots) show a row of the slot ledger.
type SlotState string

const (
	// SlotDone: the row's server finished firing the slot.
	SlotDone SlotState = "done"
	// SlotRunning: the row's server fires the slot now: it is live and
	// the slot is the one in progress, or its latest heartbeat lists the
	// slot among those it fires (a slot fired past its end).
	SlotRunning SlotState = "running"
	// SlotSuperseded: the row's firing did not finish (its server died,
	// stopped or lost the database in it), and another server's row of
	// the slot is done or running: nothing is left to catch up.
	SlotSuperseded SlotState = "superseded"
	// SlotIncomplete: the row's firing did not finish and no server
	// finished the slot or fires it now: catch-up or the sweep takes its
	// jobs.
	SlotIncomplete SlotState = "incomplete"
)

// JudgeSlots returns the state of each of recs, ledger rows newest first as
// LatestSlots returns them with cut, against servers as they last
// heartbeated (a server is live within its own timeout of now, or within
// timeout when it recorded none: Server.Live; current is the slot in
// progress at now), and how many slots are incomplete: slots with an
// incomplete row and none done or running, but for the oldest slot when cut
// (another server's row of it, done, may lie beyond the rows read).
func JudgeSlots(recs []*SlotRecord, cut bool, servers []*Server, now, current time.Time, timeout time.Duration) (states []SlotState, incomplete int) {
	byName := make(map[string]*Server, len(servers))
	for _, s := range servers {
		byName[s.Name] = s
	}
	states = make([]SlotState, len(recs))
	settled := make(map[time.Time]bool) // slots with a row done or running
	for i, r := range recs {
		s := byName[r.Server]
		switch {
		case r.Complete():
			states[i] = SlotDone
		case r.Slot.Equal(current) && s != nil && s.Live(now, timeout), r.RunningOn(s, now, timeout):
			states[i] = SlotRunning
		default:
			continue
		}
		settled[r.Slot] = true
	}
	counted := make(map[time.Time]bool)
	for i, r := range recs {
		switch {
		case states[i] != "":
		case settled[r.Slot]:
			states[i] = SlotSuperseded
		default:
			states[i] = SlotIncomplete
			if !counted[r.Slot] && !(cut && r.Slot.Equal(recs[len(recs)-1].Slot)) {
				counted[r.Slot] = true
				incomplete++
			}
		}
	}
	return states, incomplete
}
