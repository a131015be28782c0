package delivery

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff says how long to wait before retrying a failed delivery.
//
// The delay after the n-th failed attempt is Initial × Multiplier^(n−1),
// at most Max, then randomised by ±Jitter (a fraction: 0.5 spreads it over
// [0.5×, 1.5×]) so that the deliveries failing together do not all come
// back together. The computation is cenkalti/backoff's ExponentialBackOff
// (overflow-safe growth, capping and jitter, as a widely used and well
// kept library does them); the loop around it is not, since a retry here
// is a time written to the database (next_attempt_at), which survives a
// restart, rather than a sleep in a process.
type Backoff struct {
	// Initial is the delay after the first failed attempt. Default
	// BackoffInitialDefault.
	Initial time.Duration
	// Max caps the delay before jitter. Default BackoffMaxDefault.
	Max time.Duration
	// Multiplier is the growth from one delay to the next. Default 2.
	Multiplier float64
	// Jitter is the randomisation factor, in [0, 1). Default 0.5; set
	// NoJitter for none (tests).
	Jitter float64
}

// Backoff defaults.
const (
	BackoffInitialDefault    = 10 * time.Second
	BackoffMaxDefault        = time.Hour
	BackoffMultiplierDefault = 2
	BackoffJitterDefault     = 0.5
	// NoJitter as Backoff.Jitter turns the randomisation off.
	NoJitter = -1
)

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = BackoffInitialDefault
	}
	if b.Max <= 0 {
		b.Max = BackoffMaxDefault
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = BackoffMultiplierDefault
	}
	// NoJitter stays NoJitter (factor reads it as 0): New fills a target's
	// defaults in, and Delay fills them in again, so this must hold when
	// applied twice. A 0 here once became the default 0.5 the second time.
	if b.Jitter != NoJitter && (b.Jitter <= 0 || b.Jitter >= 1) {
		b.Jitter = BackoffJitterDefault
	}
	return b
}

// factor is the randomisation factor Jitter stands for.
func (b Backoff) factor() float64 {
	if b.Jitter == NoJitter {
		return 0
	}
	return b.Jitter
}

// Delay returns the wait after the failed attempt number attempt (1 for
// the first).
func (b Backoff) Delay(attempt int) time.Duration {
	b = b.withDefaults()
	eb := &backoff.ExponentialBackOff{
		InitialInterval:     b.Initial,
		RandomizationFactor: b.factor(),
		Multiplier:          b.Multiplier,
		MaxInterval:         b.Max,
	}
	eb.Reset()
	d := eb.NextBackOff()
	for range max(attempt, 1) - 1 {
		d = eb.NextBackOff()
	}
	return d
}

// Bounds returns the least and the most Delay(attempt) may be.
func (b Backoff) Bounds(attempt int) (lo, hi time.Duration) {
	b = b.withDefaults()
	base := float64(b.Initial)
	for range max(attempt, 1) - 1 {
		base = min(base*b.Multiplier, float64(b.Max))
	}
	base = min(base, float64(b.Max))
	return time.Duration(base * (1 - b.factor())), time.Duration(base*(1+b.factor())) + 1
}
