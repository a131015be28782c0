package prescient

import (
	"context"
	"time"
)

// The database's clock. Slots are fired, and overdue slots swept, by the
// client's clock, the host's unless Config.Now was given. A host whose
// clock runs ahead of the others' fires its own slots early by as much;
// its sweep took every server's slots before the one in progress by its
// clock, however far ahead (a `prescient sweep` from a laptop whose clock
// was off ran checks saying "not shipped after 3 hours" before the 3 hours
// were up; found by a trial of time). On a store whose database has a
// clock of its own (PostgreSQL), a client on the host's clock reads the
// database's at start, at each tick and before each sweep and FireSlot: a
// slot that has not begun by either clock is not fired by them, and a host
// whose clock differs from the database's by more than clockWarn is
// logged, at WARN. The ticks are timed by the database's clock (see
// tickLoop).

// clockWarn is how far the host's clock may differ from the database's
// before the client warns: clocks kept by NTP agree far closer.
const clockWarn = time.Second

// databaseNow reads the database's clock, and returns the latest it can
// be now: the reading plus the time its statement took (driver.Clock; a
// wait for a connection does not count, or a read that waited would let a
// slot be taken that much before it began). ok is false on an injected
// clock, a store without a clock of its own, or an error.
func (c *Client) databaseNow(ctx context.Context) (t time.Time, ok bool) {
	if c.host == nil {
		return time.Time{}, false
	}
	began := time.Now()
	db, err := c.drv.Clock(ctx)
	after, took := c.host(), time.Since(began)
	if err != nil || db.IsZero() {
		if err != nil {
			c.log.Debug("could not read the database's clock", "error", err)
		}
		return time.Time{}, false
	}
	// db is at most the statement's time past the database's clock as
	// Clock returned, so the difference is the host's lead, or a little
	// less.
	diff := after.Sub(db) // > 0: the host's clock is ahead
	// Kept for begun to fall back on as the earliest the database's clock
	// can have been: db less the whole call, so that the time since it
	// never makes a slot begin early (db itself, from a call that waited
	// 2 s at start, fired the ticks 2 s early; found by a review). The
	// latest is kept, or, while it is under readingFresh old, the one that
	// says the later time: each is a lower bound.
	r := &dbReading{db: db.Add(-took), at: time.Now()}
	if old := c.reading.Load(); old == nil || time.Since(old.at) >= readingFresh || !r.now().Before(old.now()) {
		c.reading.Store(r)
	}
	if off := diff.Abs() > clockWarn; c.skewed.Swap(off) != off {
		if off {
			msg := "this host's clock is ahead of the database's: this server times its slots by the database's clock; set the host's clock right (NTP)"
			if diff < 0 {
				msg = "this host's clock is behind the database's: this server fires its slots that much late; set the host's clock right (NTP)"
			}
			c.log.Warn(msg, "difference", diff.Round(time.Second))
		} else {
			c.log.Info("this host's clock agrees with the database's again", "difference", diff.Round(time.Millisecond))
		}
	}
	return db, true
}

// readingFresh is how long a kept reading of the database's clock is
// preferred to a later one that says an earlier time (a slower call).
const readingFresh = 30 * time.Second

// dbReading is a reading of the database's clock, no later than it was
// when the process's monotonic clock read at.
type dbReading struct {
	db time.Time
	at time.Time // time.Now(), for time.Since
}

// now is the earliest the database's clock can be now, by r.
func (r *dbReading) now() time.Time { return r.db.Add(time.Since(r.at)) }

// begun returns now, or the database's clock if that is earlier (see
// databaseNow): what the slots that have begun are judged by. Without a
// reading (an error, or a wait for a connection past ctx), the database's
// clock is the latest reading plus the time since it, on the process's
// monotonic clock, which no step of the host's moves: a tick whose reading
// waited for a connection held by a slot fired every slot up to the host's
// (found by a review), and the host's clock less the difference found at
// the latest reading was as wrong as a step since (found by the next).
func (c *Client) begun(ctx context.Context, now time.Time) time.Time {
	db, ok := c.databaseNow(ctx)
	if r := c.reading.Load(); !ok && r != nil {
		db, ok = r.now(), true
	}
	if ok && db.Before(now) {
		return db
	}
	return now
}
