package prescient

import "time"

// WithHostClock returns cfg with host standing in for the host's clock
// (the client's when cfg.Now is nil), for tests of a host whose clock is
// wrong.
func WithHostClock(cfg Config, host func() time.Time) Config {
	cfg.hostClock = host
	return cfg
}
