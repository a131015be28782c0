package prescient

import (
	"context"
	"time"
)

// The client's clock follows the database's. Slots are fired, and overdue
// slots swept, by the client's clock: a server whose host clock ran ahead of
// the others' fired its slots early, and its sweep (or a `prescient sweep`
// run from a laptop whose clock ran ahead) fired every server's, checks
// saying "not shipped after 3 hours" before the 3 hours were up (found by a
// trial of time). Every client on a database server reads that server's
// clock at start, at each heartbeat and before a sweep when not started,
// and runs on it when its host's clock differs by more than clockTolerance
// (the SQL functions already round on the database's now()). A client
// whose clock was injected (Config.Now) keeps it.

// clockTolerance is how far the host's clock may differ from the
// database's before the client follows the database's: clocks kept by NTP
// agree far closer, and below this a correction would only add the noise
// of the readings.
const clockTolerance = 100 * time.Millisecond

// clockReadingMax bounds the round trip of a reading worth taking: the
// database's clock is read somewhere within it, so a longer one (a wait for
// a pool connection) says too little.
const clockReadingMax = 100 * time.Millisecond

// syncClock reads the database's clock and, when the host's differs from it
// by more than clockTolerance (or no longer does), makes the client's clock
// follow it, saying so in the log.
func (c *Client) syncClock(ctx context.Context) {
	if c.host == nil {
		return // an injected clock
	}
	before := c.host()
	db, err := c.drv.Clock(ctx)
	after := c.host()
	rtt := after.Sub(before)
	if err != nil || db.IsZero() || rtt < 0 || rtt > clockReadingMax {
		if err != nil {
			c.log.Debug("could not read the database's clock", "error", err)
		}
		return
	}
	diff := db.Sub(before.Add(rtt / 2)) // what to add to the host's clock
	old := time.Duration(c.clockOffset.Load())
	if (diff - old).Abs() <= clockTolerance {
		return
	}
	if diff.Abs() <= clockTolerance {
		c.clockOffset.Store(0)
		c.log.Info("this host's clock agrees with the database's again: the server runs on its own clock", "difference", -diff)
		return
	}
	c.clockOffset.Store(int64(diff))
	way := "ahead of"
	if diff > 0 {
		way = "behind"
	}
	c.log.Warn("this host's clock is "+way+" the database's: the server runs on the database's clock, "+
		"so that no slot fires early nor late (set the host's clock right: NTP)", "difference", -diff)
}
