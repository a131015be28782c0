package driver

import (
	"testing"
	"time"
)

func TestSlotRecordRunningOn(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	now := t0.Add(5 * time.Minute)
	live := &Server{Name: "web-1", StartedAt: t0.Add(-time.Hour), HeartbeatAt: now.Add(-3 * time.Second),
		Firing: []time.Time{t0.Add(-time.Minute), t0}}
	row := &SlotRecord{Slot: t0, Server: "web-1", StartedAt: t0}
	for _, tc := range []struct {
		name string
		rec  func(r *SlotRecord)
		srv  func(s *Server) *Server
		want bool
	}{
		{name: "listed by its live server", want: true},
		{name: "finished", rec: func(r *SlotRecord) { r.FinishedAt = now }},
		{name: "not listed (ended, lost its finish, or left by a process that died)", srv: func(s *Server) *Server { s.Firing = s.Firing[:1]; return s }},
		{name: "the server heartbeats no list (an older prescient)", srv: func(s *Server) *Server { s.Firing = nil; return s }},
		{name: "the server is gone", srv: func(s *Server) *Server { s.HeartbeatAt = now.Add(-31 * time.Second); return s }},
		{name: "the heartbeat is just within the timeout", srv: func(s *Server) *Server { s.HeartbeatAt = now.Add(-30 * time.Second); return s }, want: true},
		{name: "not registered", srv: func(*Server) *Server { return nil }},
		{name: "another server", srv: func(s *Server) *Server { s.Name = "web-2"; return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := *row, *live
			if tc.rec != nil {
				tc.rec(&r)
			}
			srv := &s
			if tc.srv != nil {
				srv = tc.srv(srv)
			}
			if got := r.RunningOn(srv, now, 30*time.Second); got != tc.want {
				t.Errorf("RunningOn = %v, want %v", got, tc.want)
			}
		})
	}
}
