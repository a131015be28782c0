package prescient

import (
	"context"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// The declarations in this file keep code written against the store API of
// earlier versions compiling, such as the peer benchmark's prescientbench
// (../shared/bench/peers), which this repository does not own. New code uses
// package driver; these go once nothing needs them.

// JobsDueParams pages through the jobs due in one slot.
//
// Deprecated: use driver.JobsDueParams.
type JobsDueParams = driver.JobsDueParams

// DueJob is a due job's identity.
//
// Deprecated: use driver.DueJob.
type DueJob = driver.DueJob

// Decision is the new state of one claimed job.
//
// Deprecated: use driver.Decision.
type Decision = driver.Decision

// JobsProcessParams says which jobs postgres.Store.JobsProcess claims.
//
// Deprecated: the engine owns processing (see driver.Tx).
type JobsProcessParams struct {
	IDs    []int64
	Slot   time.Time
	Now    time.Time
	Server string
}

// ProcessFunc decides the jobs postgres.Store.JobsProcess claimed.
//
// Deprecated: the engine owns processing (see driver.Tx).
type ProcessFunc func(ctx context.Context, tx checks.Tx, jobs []*checks.Job) *ProcessResult

// ProcessResult holds one decision per claimed job, in their order.
//
// Deprecated: the engine owns processing (see driver.Tx).
type ProcessResult struct {
	Decisions []Decision
	// Discard is ignored: JobsProcess hands out no transaction to write in.
	Discard bool
}
