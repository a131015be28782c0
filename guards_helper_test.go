package prescient_test

import (
	"time"

	"github.com/prescient-dev/prescient/guards"
)

func guardsRuntime(d time.Duration) guards.Limits { return guards.Limits{Runtime: d} }
