package prescient

import (
	"context"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/driver"
)

// hungNopTx is a processing transaction whose savepoint ends cost
// nothing, as PostgreSQL's do: procTx.Release and RollbackTo send no
// statement, they queue one for the check's next statement or the commit.
type hungNopTx struct{ driver.Tx }

func (hungNopTx) Release(context.Context) error    { return nil }
func (hungNopTx) RollbackTo(context.Context) error { return nil }

// The engine ends each check's savepoint with Release or RollbackTo (in
// every group after a failure, for isolateAfterFailure, and always with
// SavepointEveryCheck). On PostgreSQL neither sends a statement (procTx
// defers them to the check's next statement or the commit, each of those
// bounded on its own), so bounding them cannot end a hang; but boundedTx's
// first version wrapped each in context.WithTimeout and two closures: a
// timer and several allocations per check on the per-check path, for
// nothing (found by a review). It passes them through now.
func TestSavepointEndsAddNoAllocations(t *testing.T) {
	ctx := context.Background()
	raw := hungNopTx{}
	var bt driver.Tx = &boundedTx{Tx: raw, limit: 30 * time.Second}
	for name, end := range map[string][2]func(context.Context) error{
		"Release":    {raw.Release, bt.Release},
		"RollbackTo": {raw.RollbackTo, bt.RollbackTo},
	} {
		base := testing.AllocsPerRun(1000, func() { _ = end[0](ctx) })
		got := testing.AllocsPerRun(1000, func() { _ = end[1](ctx) })
		if got > base {
			t.Errorf("%s through boundedTx allocates %.0f times per check (%.0f without it), and starts a timer", name, got, base)
		}
	}
}
