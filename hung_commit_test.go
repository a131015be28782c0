package prescient_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
)

// hungThaw lets a frozen proxy forward again, without closing anything:
// the primary that hung answers again (a VM resumed, a disk unstuck), and
// what it had received (here: a COMMIT) runs.
func (p *freezeProxy) hungThaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
		p.thaw = make(chan struct{})
	}
}

// hungFreezeAtCommit freezes the proxy just before the first processing
// transaction with decisions commits.
type hungFreezeAtCommit struct {
	driver.Driver
	once   *sync.Once
	freeze func()
}

func (d hungFreezeAtCommit) Begin(ctx context.Context, p *driver.BeginParams) (driver.Tx, error) {
	tx, err := d.Driver.Begin(ctx, p)
	if err != nil {
		return nil, err
	}
	return &hungFreezeTx{Tx: tx, d: d}, nil
}

type hungFreezeTx struct {
	driver.Tx
	d       hungFreezeAtCommit
	applied bool
}

func (t *hungFreezeTx) Apply(ctx context.Context, p *driver.ApplyParams) error {
	t.applied = len(p.Decisions) > 0
	return t.Tx.Apply(ctx, p)
}

func (t *hungFreezeTx) Commit(ctx context.Context) error {
	if t.applied {
		t.d.once.Do(t.d.freeze)
	}
	return t.Tx.Commit(ctx)
}

// The bound fires mid-COMMIT (commit in doubt): the primary received the
// COMMIT and hangs. The engine counts the group's writes as lost, and
// applies the failure it held afresh (recover). Then the primary answers
// again and the COMMIT runs after all. Nothing may be lost or applied twice:
// job 1 (its check wrote an alert) done once with one alert, job 2 (its
// check failed) pending with one failure, not two.
func TestCommitInDoubtThenThawCommitsOnce(t *testing.T) {
	h, _, proxy, schema := openHungStore(t, 8)
	h.store = wrappedStore{Store: h.store, drv: hungFreezeAtCommit{Driver: h.store.Driver(), once: &sync.Once{}, freeze: proxy.freeze}}
	var mu sync.Mutex
	runs := 0
	reg := &checks.Registry{}
	if err := reg.Register("unshipped", func(ctx context.Context, j *checks.Job) (time.Time, error) {
		if j.Key == "2" {
			return time.Time{}, errors.New("carrier API down")
		}
		mu.Lock()
		runs++
		mu.Unlock()
		_, err := j.Tx.Exec(ctx, "INSERT INTO alerts (entity_key, stage) VALUES ($1, 'alert')", j.Key)
		return time.Time{}, err
	}, nil); err != nil {
		t.Fatal(err)
	}
	clk := newClock("2026-03-10T10:00:00Z")
	c := h.client(clk, reg, func(cfg *prescient.Config) {
		cfg.Heartbeat, cfg.ServerTimeout = 100*time.Millisecond, time.Second
		cfg.Guards.Runtime = 2 * time.Second
		cfg.GroupSize = 2
		cfg.Workers = 1
	})
	schedule(t, c, "1", "unshipped", "2026-03-10T10:15:00Z")
	schedule(t, c, "2", "unshipped", "2026-03-10T10:15:00Z")
	clk.Set("2026-03-10T10:15:00Z")
	began := time.Now()
	_, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
	t.Logf("firing with the commit cut off after %s: %v", time.Since(began), err)
	mu.Lock()
	before := runs
	mu.Unlock()
	proxy.hungThaw()
	for i := 0; ; i++ {
		rec, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z"))
		if err == nil && rec.Complete() {
			break
		}
		if i == 10 {
			t.Fatalf("slot fired again %d times and still failed: %v", i+1, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The zombie's COMMIT may land after the slot fired again (it skipped
	// the rows the zombie held): wait for it to settle.
	deadline := time.Now().Add(15 * time.Second)
	for h.count(`SELECT 1 FROM `+schema+`.prescient_jobs WHERE entity_key = '1'`) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.FireSlot(context.Background(), ts("2026-03-10T10:15:00Z")); err != nil {
		t.Logf("fired again: %v", err)
	}
	mu.Lock()
	t.Logf("job 1's check ran %d time(s) before the thaw, %d after", before, runs-before)
	mu.Unlock()
	wantOutcome(t, c, "1", history.Done, 1)
	if n := h.count(`SELECT 1 FROM ` + schema + `.alerts WHERE entity_key = '1'`); n != 1 {
		t.Errorf("%d alerts for order 1, want 1", n)
	}
	j := wantPending(t, c, "2", "unshipped")
	if j.FailureCount != 1 {
		t.Errorf("order 2 has %d failures recorded, want 1 (its check failed once)", j.FailureCount)
	}
}
