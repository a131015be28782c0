package prescient_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// The benchmarks measure speed and memory on every store in storeKinds; the
// tests never assert timings. Run them with
//
//	go test -run XXX -bench . -benchtime 1x .   # a quick pass, about a minute
//	go test -run XXX -bench . .                 # steadier numbers
//
// The PostgreSQL ones need the server pgtest points at.

// benchJobs is how many jobs one operation of the scheduling and firing
// benchmarks handles.
const benchJobs = 1000

// quiet leaves the engine's logs out of a benchmark's output (a line per
// slot fired would fall between the result lines) and out of its time.
func quiet(cfg *prescient.Config) { cfg.Logger = slog.New(slog.DiscardHandler) }

// forEachBenchStore runs fn as one sub-benchmark per store kind, with the
// opener of a fresh store and the scenario harness over it.
func forEachBenchStore(b *testing.B, fn func(b *testing.B, open func(testing.TB) *harness)) {
	for _, k := range storeKinds {
		open := func(tb testing.TB) *harness {
			h := k.open(tb)
			h.name = k.name
			return h
		}
		b.Run(k.name, func(b *testing.B) { fn(b, open) })
	}
}

// benchParams returns n schedule params of check, keys first..first+n-1, due at at.
func benchParams(check string, first, n int, at time.Time) []prescient.ScheduleParams {
	ps := make([]prescient.ScheduleParams, n)
	for i := range ps {
		ps[i] = prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(first + i), Check: check, At: at}
	}
	return ps
}

// benchSchedule schedules ps in calls of benchJobs.
func benchSchedule(tb testing.TB, c *prescient.Client, ps []prescient.ScheduleParams) {
	tb.Helper()
	for len(ps) > 0 {
		n := min(benchJobs, len(ps))
		if _, err := c.ScheduleMany(context.Background(), ps[:n]); err != nil {
			tb.Fatalf("schedule: %v", err)
		}
		ps = ps[n:]
	}
}

// reportJobRate reports jobs per second of measured time, for jobsPerOp jobs
// in each of b.N operations.
func reportJobRate(b *testing.B, jobsPerOp int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N*jobsPerOp)/s, "jobs/s")
	}
}

// BenchmarkScheduleMany measures scheduling benchJobs new jobs in one
// ScheduleMany call (one statement, one transaction).
func BenchmarkScheduleMany(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, open func(testing.TB) *harness) {
		s := open(b)
		clk := newClock("2026-03-10T09:00:00Z")
		c := s.client(clk, &checks.Registry{}, quiet)
		at := ts("2026-03-10T12:00:00Z")
		ctx := context.Background()
		b.ReportAllocs()
		op := 0
		for b.Loop() {
			if _, err := c.ScheduleMany(ctx, benchParams("bench", op*benchJobs, benchJobs, at)); err != nil {
				b.Fatal(err)
			}
			op++
		}
		reportJobRate(b, benchJobs)
	})
}

// benchFire measures FireSlot on slots of benchJobs due jobs each, with the
// checks in reg under the name "bench". Scheduling each slot's jobs is not
// measured.
func benchFire(b *testing.B, reg *checks.Registry) {
	forEachBenchStore(b, func(b *testing.B, open func(testing.TB) *harness) {
		s := open(b)
		clk := newClock("2026-03-10T09:00:00Z")
		c := s.client(clk, reg, quiet)
		ctx := context.Background()
		b.ReportAllocs()
		op := 0
		for b.Loop() {
			b.StopTimer()
			slot := quarterHours.Add(clk.Now(), 1)
			benchSchedule(b, c, benchParams("bench", op*benchJobs, benchJobs, slot))
			clk.Set(slot.Format(time.RFC3339))
			b.StartTimer()

			rec, err := c.FireSlot(ctx, slot)
			if err != nil {
				b.Fatal(err)
			}
			if rec.Checked != benchJobs {
				b.Fatalf("slot %s checked %d jobs, want %d", slot, rec.Checked, benchJobs)
			}
			op++
		}
		reportJobRate(b, benchJobs)
	})
}

// BenchmarkFireSlot measures firing a slot of benchJobs due jobs of a
// single-job check that writes one alert row through job.Tx.
func BenchmarkFireSlot(b *testing.B) {
	reg := &checks.Registry{}
	err := reg.Register("bench", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
		return time.Time{}, err
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	benchFire(b, reg)
}

// BenchmarkFireSlotBatch is BenchmarkFireSlot with a batch check, which
// writes the alert rows of its whole batch in one statement.
func BenchmarkFireSlotBatch(b *testing.B) {
	reg := &checks.Registry{}
	err := reg.RegisterBatch("bench", func(ctx context.Context, js []*checks.Job) ([]checks.Result, error) {
		var q strings.Builder
		q.WriteString("INSERT INTO alerts (entity_key, stage) VALUES ")
		args := make([]any, len(js))
		for i, j := range js {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "($%d, 'alert')", i+1)
			args[i] = j.Key
		}
		if _, err := js[0].Tx.Exec(ctx, q.String(), args...); err != nil {
			return nil, err
		}
		return make([]checks.Result, len(js)), nil
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	benchFire(b, reg)
}

// BenchmarkFireSlotPureSQL is the reference BenchmarkFireSlot and
// BenchmarkFireSlotBatch compare to: the same work (write each due job's
// alert, finish the job) done by set-based SQL on the same table, with no
// engine, no history and no per-job decisions: what a hand-written cron
// statement costs. Run beside the others (go test -bench FireSlot), it makes
// their jobs/s a ratio on the same machine at the same moment.
func BenchmarkFireSlotPureSQL(b *testing.B) {
	forEachBenchStore(b, func(b *testing.B, open func(testing.TB) *harness) {
		s := open(b)
		clk := newClock("2026-03-10T09:00:00Z")
		c := s.client(clk, &checks.Registry{}, quiet)
		b.ReportAllocs()
		op := 0
		for b.Loop() {
			b.StopTimer()
			slot := quarterHours.Add(clk.Now(), 1)
			benchSchedule(b, c, benchParams("bench", op*benchJobs, benchJobs, slot))
			clk.Set(slot.Format(time.RFC3339))
			b.StartTimer()

			switch s.name {
			case "postgres":
				s.exec(`WITH gone AS (DELETE FROM prescient_jobs WHERE next_check_at = $1 RETURNING entity_key)
					INSERT INTO alerts (entity_key, stage) SELECT entity_key, 'alert' FROM gone`, slot)
			default:
				s.exec(`INSERT INTO alerts (entity_key, stage) SELECT entity_key, 'alert' FROM prescient_jobs WHERE next_check_at = $1`, micros(slot))
				s.exec(`DELETE FROM prescient_jobs WHERE next_check_at = $1`, micros(slot))
			}
			op++
		}
		reportJobRate(b, benchJobs)
		if n := s.count("SELECT * FROM alerts"); n != op*benchJobs {
			b.Fatalf("%d alerts after %d slots of %d jobs", n, op, benchJobs)
		}
	})
}

// micros is a time as the SQLite store keeps it.
func micros(t time.Time) int64 { return t.UnixMicro() }

// largeTable is how many other pending jobs the large table of
// BenchmarkDueQueryLargeTable holds: 100k, or 10k in a race-detector build,
// where filling SQLite with 100k jobs takes minutes and timings mean little.
func largeTable() int {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				return 10_000
			}
		}
	}
	return 100_000
}

// BenchmarkDueQueryLargeTable measures listing the jobs due in one slot (the
// query FireSlot pages with) while other slots hold 1k or 100k pending jobs
// (see largeTable): the ns/due-job should not grow with the table.
func BenchmarkDueQueryLargeTable(b *testing.B) {
	const (
		due        = prescient.BatchSizeDefault // jobs due in the measured slot: one page
		otherSlots = 200                        // slots the other jobs spread over, around it
	)
	forEachBenchStore(b, func(b *testing.B, open func(testing.TB) *harness) {
		for _, others := range []int{1_000, largeTable()} {
			b.Run(fmt.Sprintf("pending=%dk", others/1000), func(b *testing.B) {
				s := open(b)
				clk := newClock("2026-03-10T09:00:00Z")
				c := s.client(clk, &checks.Registry{}, quiet)
				start := quarterHours.Add(clk.Now(), 1)
				slot := quarterHours.Add(start, otherSlots/2)
				benchSchedule(b, c, benchParams("bench", 0, due, slot))
				ps := make([]prescient.ScheduleParams, 0, others)
				for i := range others {
					at := quarterHours.Add(start, i%otherSlots)
					if at.Equal(slot) {
						at = quarterHours.Add(start, otherSlots)
					}
					ps = append(ps, prescient.ScheduleParams{Entity: "order", Key: strconv.Itoa(due + i), Check: "bench", At: at})
				}
				benchSchedule(b, c, ps)
				// Production tables have statistics; a freshly filled one
				// has none until autovacuum comes by.
				s.exec("ANALYZE prescient_jobs")

				ctx := context.Background()
				p := &driver.JobsDueParams{Slot: slot, Limit: due}
				// Warm the connection and statement caches, as a running
				// server's are, so that even -benchtime 1x measures the query.
				if _, err := s.store.Driver().JobsDue(ctx, p); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					got, err := s.store.Driver().JobsDue(ctx, p)
					if err != nil {
						b.Fatal(err)
					}
					if len(got) != due {
						b.Fatalf("JobsDue listed %d jobs, want %d", len(got), due)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*due), "ns/due-job")
			})
		}
	})
}
