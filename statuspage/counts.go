package statuspage

import (
	"context"
	"time"

	"github.com/prescient-dev/prescient"
)

// staleMax is the oldest a reading of the counts may be and still be shown
// while a new one is read: older counts are not worth showing, and the load
// waits for the new reading instead.
const staleMax = time.Minute

// counts is one reading of the figures that cost a count of the pending
// table and of a day of history.
type counts struct {
	// at is when the reading started, on the cache's clock (Opts.now); asOf
	// is the same moment on the client's clock, which the page shows.
	at     time.Time
	asOf   time.Time
	status *prescient.Status
	err    error
}

// readCounts returns the latest reading of the counts, read at most once
// per Opts.CacheFor whatever the number of viewers. A load within CacheFor
// of the latest reading (a failed one too, so that a store in trouble is not
// asked again by every viewer) reuses it. A load after it starts a new
// reading in the background, which concurrent loads share, and shows the
// latest reading meanwhile if it is younger than staleMax (the page says
// when it was read); otherwise, and when there is none yet or CacheFor is
// -1, it waits for the new one. So a page watched through its reloads never
// waits for the counts, which take seconds over a million pending jobs.
func (p *page) readCounts(ctx context.Context) *counts {
	p.countsMu.Lock()
	last, now := p.counts, p.opts.now()
	age := time.Duration(-1)
	if last != nil && !now.Before(last.at) {
		age = now.Sub(last.at)
	}
	if age >= 0 && age < p.opts.CacheFor {
		p.countsMu.Unlock()
		return last
	}
	if p.reading == nil {
		done := make(chan struct{})
		p.reading = done
		go p.refreshCounts(done)
	}
	done := p.reading
	p.countsMu.Unlock()
	if age >= 0 && age < staleMax && p.opts.CacheFor > 0 {
		return last
	}
	select {
	case <-done:
	case <-ctx.Done():
		return &counts{asOf: p.client.Config().Now().UTC(), err: ctx.Err()}
	}
	p.countsMu.Lock()
	defer p.countsMu.Unlock()
	return p.counts
}

// refreshCounts reads the counts, bounded by Opts.ReadTimeout and not by
// the load that asked (which may go away while other loads wait), keeps the
// reading and closes done.
func (p *page) refreshCounts(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.ReadTimeout)
	defer cancel()
	c := &counts{at: p.opts.now(), asOf: p.client.Config().Now().UTC()}
	c.status, c.err = p.client.Status(ctx, &prescient.StatusOpts{Upcoming: p.opts.Upcoming, Recent: 1})
	p.countsMu.Lock()
	p.counts, p.reading = c, nil
	p.countsMu.Unlock()
	close(done)
}
