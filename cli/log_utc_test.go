package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLogTimesInUTC: with TZ set, a record's time was written in the local
// zone (time=2026-11-28T08:16:55.706+11:00) beside its slot in UTC
// (slot=2026-11-27T21:16:50.000Z); both are in UTC now, in either format
// (found by a trial of time).
func TestLogTimesInUTC(t *testing.T) {
	lordHowe := time.FixedZone("LHDT", 11*3600)
	at := time.Date(2026, 11, 28, 8, 16, 55, 0, lordHowe)
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		e := &env{opts: (&Opts{Err: &out}).withDefaults()}
		cfg := DefaultConfig()
		cfg.Log.Format = format
		r := slog.NewRecord(at, slog.LevelInfo, "slot fired", 0)
		r.AddAttrs(slog.Time("slot", at), slog.Duration("lag", 1500*time.Millisecond))
		if err := e.logger(cfg).Handler().Handle(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		line := out.String()
		if strings.Contains(line, "+11:00") || strings.Count(line, "2026-11-27T21:16:55") != 2 || !strings.Contains(line, "1.5s") {
			t.Errorf("log.format %s: %q; want the record's time and the slot in UTC (2026-11-27T21:16:55Z), the lag as 1.5s", format, line)
		}
	}
}
