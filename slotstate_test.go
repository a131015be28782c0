package prescient_test

import (
	"slices"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
)

func TestJudgeSlots(t *testing.T) {
	now := ts("2026-03-10T10:20:00Z")
	current, s1015, s1000 := ts("2026-03-10T10:15:00Z"), ts("2026-03-10T10:00:00Z"), ts("2026-03-10T09:45:00Z")
	const timeout = 30 * time.Second
	live := &prescient.Server{Name: "live", HeartbeatAt: now.Add(-timeout)}
	firing := &prescient.Server{Name: "firing", HeartbeatAt: now.Add(-time.Second), Firing: []time.Time{s1015}}
	gone := &prescient.Server{Name: "gone", HeartbeatAt: now.Add(-timeout - time.Nanosecond), Firing: []time.Time{current, s1015}}
	patient := &prescient.Server{Name: "patient", HeartbeatAt: now.Add(-time.Hour), Firing: []time.Time{s1015}, Timeout: 2 * time.Hour}
	servers := []*prescient.Server{live, firing, gone, patient}
	row := func(slot time.Time, server string, done bool) *prescient.SlotRecord {
		r := &prescient.SlotRecord{Slot: slot, Server: server, Kind: "fire", StartedAt: slot}
		if done {
			r.FinishedAt = slot.Add(time.Minute)
		}
		return r
	}
	for _, tc := range []struct {
		name       string
		recs       []*prescient.SlotRecord
		cut        bool
		want       []prescient.SlotState
		incomplete int
	}{
		{"none", nil, false, []prescient.SlotState{}, 0},
		{"done, by a server gone since", []*prescient.SlotRecord{row(s1015, "gone", true)}, false,
			[]prescient.SlotState{prescient.SlotDone}, 0},
		{"the slot in progress, by a live server", []*prescient.SlotRecord{row(current, "live", false)}, false,
			[]prescient.SlotState{prescient.SlotRunning}, 0},
		{"the slot in progress, by a gone server its last heartbeat said fired it", []*prescient.SlotRecord{row(current, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete}, 1},
		{"the slot in progress, by a server not registered", []*prescient.SlotRecord{row(current, "unknown", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete}, 1},
		{"past its end, listed by its live server", []*prescient.SlotRecord{row(s1015, "firing", false)}, false,
			[]prescient.SlotState{prescient.SlotRunning}, 0},
		{"past its end, not listed by its live server", []*prescient.SlotRecord{row(s1000, "firing", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete}, 1},
		{"past its end, listed by a server live by its own timeout", []*prescient.SlotRecord{row(s1015, "patient", false)}, false,
			[]prescient.SlotState{prescient.SlotRunning}, 0},
		{"the slot in progress, by a server live by its own timeout", []*prescient.SlotRecord{row(current, "patient", false)}, false,
			[]prescient.SlotState{prescient.SlotRunning}, 0},
		{"past its end, listed by a gone server", []*prescient.SlotRecord{row(s1015, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete}, 1},
		{"cut short, and done by another", []*prescient.SlotRecord{row(s1015, "live", true), row(s1015, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotDone, prescient.SlotSuperseded}, 0},
		{"cut short, and the other's row after it", []*prescient.SlotRecord{row(s1015, "gone", false), row(s1015, "live", true)}, false,
			[]prescient.SlotState{prescient.SlotSuperseded, prescient.SlotDone}, 0},
		{"cut short, and fired by another now", []*prescient.SlotRecord{row(s1015, "firing", false), row(s1015, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotRunning, prescient.SlotSuperseded}, 0},
		{"cut short by two servers: one slot incomplete", []*prescient.SlotRecord{row(s1015, "live", false), row(s1015, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete, prescient.SlotIncomplete}, 1},
		{"the rows read end inside the oldest slot's: it is not counted", []*prescient.SlotRecord{row(s1015, "gone", false), row(s1000, "gone", false)}, true,
			[]prescient.SlotState{prescient.SlotIncomplete, prescient.SlotIncomplete}, 1},
		{"every row read", []*prescient.SlotRecord{row(s1015, "gone", false), row(s1000, "gone", false)}, false,
			[]prescient.SlotState{prescient.SlotIncomplete, prescient.SlotIncomplete}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := prescient.JudgeSlots(tc.recs, tc.cut, servers, now, current, timeout)
			if !slices.Equal(got, tc.want) || n != tc.incomplete {
				t.Errorf("JudgeSlots = %v, %d incomplete; want %v, %d", got, n, tc.want, tc.incomplete)
			}
		})
	}
}
