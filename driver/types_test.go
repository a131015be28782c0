package driver

import (
	"testing"
	"time"
)

func TestSlotRecordRunningOn(t *testing.T) {
	t0 := time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	now := t0.Add(5 * time.Minute)
	live := &Server{Name: "web-1", StartedAt: t0.Add(-time.Hour), HeartbeatAt: now.Add(-3 * time.Second)}
	firing := &SlotRecord{Slot: t0, Server: "web-1", StartedAt: t0, FiringSince: t0.Add(2 * time.Minute)}
	for _, tc := range []struct {
		name string
		rec  func(r *SlotRecord)
		srv  func(s *Server) *Server
		want bool
	}{
		{name: "a firing under way on a live server", want: true},
		{name: "finished", rec: func(r *SlotRecord) { r.FinishedAt = now }},
		{name: "no firing under way (ended, cut short, or an older prescient's row)", rec: func(r *SlotRecord) { r.FiringSince = time.Time{} }},
		{name: "the server is gone", srv: func(s *Server) *Server { s.HeartbeatAt = now.Add(-31 * time.Second); return s }},
		{name: "the heartbeat is just within the timeout", srv: func(s *Server) *Server { s.HeartbeatAt = now.Add(-30 * time.Second); return s }, want: true},
		{name: "the server restarted since the firing started", srv: func(s *Server) *Server { s.StartedAt = t0.Add(3 * time.Minute); return s }},
		{name: "the firing started as the server did", srv: func(s *Server) *Server { s.StartedAt = t0.Add(2 * time.Minute); return s }, want: true},
		{name: "not registered", srv: func(*Server) *Server { return nil }},
		{name: "another server", srv: func(s *Server) *Server { s.Name = "web-2"; return s }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s := *firing, *live
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
