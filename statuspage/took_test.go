package statuspage

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/driver"
)

// A slot fired at its boundary in 1.5s and again by a sweep three minutes
// later, finding nothing, took 1.5s: the timeline showed 3m from the first
// start to the last finish.
func TestTimelineShowsTheFiringsTime(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, st.open(t))
			slot0959 := at(9, 59, 0)
			must(t, f.drv.SlotStart(ctx, &driver.SlotRecord{Slot: slot0959, Server: "web-1", Kind: prescient.KindFire, StartedAt: at(9, 59, 0).Add(300 * time.Millisecond)}))
			must(t, f.drv.SlotFinish(ctx, &driver.SlotRecord{Slot: slot0959, Server: "web-1", Kind: prescient.KindFire,
				StartedAt: at(9, 59, 0).Add(300 * time.Millisecond), FinishedAt: at(9, 59, 1).Add(800 * time.Millisecond), Checked: 4, Took: 1500 * time.Millisecond}))
			must(t, f.drv.SlotStart(ctx, &driver.SlotRecord{Slot: slot0959, Server: "web-1", Kind: prescient.KindSweep, StartedAt: at(10, 2, 0)}))
			must(t, f.drv.SlotFinish(ctx, &driver.SlotRecord{Slot: slot0959, Server: "web-1", Kind: prescient.KindSweep,
				StartedAt: at(10, 2, 0), FinishedAt: at(10, 2, 0)}))
			srv := f.serve(t, &Opts{CacheFor: -1})
			code, _, body := get(t, srv, "/")
			if code != http.StatusOK {
				t.Fatalf("GET /: %d", code)
			}
			r := text(row(t, body, `data-slot="`+iso(slot0959)+`"`))
			wantText(t, "slot 09:59", r, "done", "sweep", "4", "300ms", "1.50s")
			if strings.Contains(r, "3m") {
				t.Errorf("slot 09:59 shows the span from its first start to its last finish: %s", r)
			}
		})
	}
}
