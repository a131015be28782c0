package prescient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/driver"
)

// Slot ledger kinds.
const (
	KindFire    = "fire"
	KindCatchup = "catchup"
	KindSweep   = "sweep"
)

// FireSlot processes exactly the jobs due in slot (next_check_at = slot) and
// returns what this call did: the jobs it checked, their outcomes and
// failures, and the jobs it left pending for want of their check. It fires
// the slot whether or not this server owns it: ownership decides when the
// engine calls FireSlot, not what FireSlot does. Jobs another server is
// processing are skipped. slot must lie on the grid.
//
// The slot ledger keeps one row per slot and server, adding up every firing
// of the slot by that server (see Slots); FireSlot's record is this call's
// share of it, naming the slot, the server and the kind, with this call's
// start, its duration (Took) and, when it completed the slot, its finish.
//
// A client never fires a slot twice at once: if it is firing slot already
// (its tick, its sweep or another FireSlot call), FireSlot waits for that
// firing to end, then fires what is left. That can take as long as a large
// slot does, and a check that calls FireSlot on its own slot waits until ctx
// ends.
//
// A slot that has not begun (after the client's clock, or, on the host's
// clock, the database server's if that is earlier) is refused: its jobs
// would run before their time.
func (c *Client) FireSlot(ctx context.Context, slot time.Time) (*SlotRecord, error) {
	if now := c.begun(ctx, c.now()); slot.After(now) {
		return nil, fmt.Errorf("prescient: fire slot %s: it has not begun (now %s): its jobs would run before their time",
			slot.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return c.fireSlot(ctx, ctx, slot, KindFire, true)
}

// errSlotBusy is fireSlot's answer, without wait, for a slot the client is
// firing already.
var errSlotBusy = errors.New("this server is firing the slot already")

// fireSlot stops dispatching new jobs when work ends, and interrupts running
// checks (releasing their jobs untouched) when hard ends. If the client is
// firing slot already, it waits for that firing to end when wait is set,
// and returns errSlotBusy at once otherwise.
func (c *Client) fireSlot(work, hard context.Context, slot time.Time, kind string, wait bool) (did *SlotRecord, err error) {
	slot = slot.UTC()
	if !c.cfg.Grid.IsBoundary(slot) {
		return nil, fmt.Errorf("prescient: fire slot %s: not on the grid (%s)", slot.Format(time.RFC3339Nano), c.cfg.Grid)
	}
	release, err := c.holdSlot(work, slot, wait)
	if err != nil {
		return nil, err
	}
	defer release()
	start, began := c.now(), time.Now()
	name := slot.Format(time.RFC3339)
	ledger, err := c.ledgerStart(hard, slot, kind)
	if err != nil {
		c.storeError(StoreOpLedger, err)
		return nil, fmt.Errorf("prescient: fire slot %s: %w", name, err)
	}
	defer func() { c.slotFired(slot, kind, start, time.Since(began), did, err, work.Err() != nil) }()
	t := &firingTally{}
	flushed := c.recordProgress(hard, ledger, t)
	did, unknown, cut := c.dispatch(work, hard, slot, t)
	if did == nil {
		did = &SlotRecord{}
	}
	// What the ledger has of this firing already (its progress, recorded
	// while it ran), to be left out of what SlotFinish adds below.
	before := flushed()
	// The record names what it is of, as a ledger row does; FinishedAt is
	// set once the firing completed.
	did.Slot, did.Server, did.Kind, did.StartedAt = slot, c.cfg.Server, kind, start
	c.noteUnknown(slot, unknown)
	ledger.Add(minus(did, before))
	// Unknown counts the jobs the latest firing left pending, not a sum over
	// firings (each would count the same jobs again).
	ledger.Unknown = did.Unknown
	if cut == nil && work.Err() != nil && c.slotHasDue(hard, slot) {
		// Stopped with jobs of the slot left due: not listed yet, or left
		// by a group that stopped starting checks. (Stopped with none
		// left, the firing is complete: nothing is left for a catch-up to
		// fire, so a row left unfinished would read as an incomplete slot
		// forever.)
		cut = fmt.Errorf("stopped: %w", work.Err())
	}
	// This firing's own time, on the client's clock as the row's start and
	// finish are; SlotFinish adds it to the earlier firings'.
	end := c.now()
	did.Took = max(end.Sub(start), 0)
	ledger.Took = max(did.Took-before.Took, 0)
	if cut != nil {
		// The slot stays incomplete in the ledger, with what it did: the
		// rest is still due, and catch-up or the sweep will take it.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(hard), stopTimeout)
		defer cancel()
		if err := c.drv.SlotFinish(lctx, ledger); err != nil {
			c.storeError(StoreOpLedger, err)
			cut = errors.Join(cut, err)
		}
		return did, fmt.Errorf("prescient: fire slot %s: %w", name, cut)
	}
	ledger.FinishedAt = end
	if err := c.drv.SlotFinish(hard, ledger); err != nil {
		c.storeError(StoreOpLedger, err)
		return did, fmt.Errorf("prescient: fire slot %s: %w", name, err)
	}
	did.FinishedAt = ledger.FinishedAt
	return did, nil
}

// holdSlot marks slot as being fired by the client until release is called.
// Two firings of one slot by one client would only get in each other's way:
// the second lists the jobs the first has listed and not yet claimed, claims
// some of them, and the first's claims come up short and are done again (a
// scheduled sweep meeting a 200,000-job slot still running after its
// boundary had 25 to 37% of the slot's transactions rolled back and done
// again). (Their ledger counts would add up: SlotFinish adds each
// firing's.) The price: jobs another server releases in a held slot after its firing has
// listed past them wait for the next sweep, where a second firing beside it
// would have found them. If slot is held, holdSlot waits for its release
// with wait set (or until ctx ends), and returns errSlotBusy otherwise.
func (c *Client) holdSlot(ctx context.Context, slot time.Time, wait bool) (release func(), err error) {
	for {
		c.firingMu.Lock()
		done, busy := c.firing[slot]
		if !busy {
			done = make(chan struct{})
			c.firing[slot] = done
			c.firingMu.Unlock()
			if slot.Before(c.cfg.Grid.Floor(c.now())) {
				// A past slot (a catch-up, a sweep): not the slot in
				// progress, which readers call running anyway. Listed
				// at once, rather than after up to a Heartbeat.
				select {
				case c.beatSoon <- struct{}{}:
				default:
				}
			}
			return func() {
				c.firingMu.Lock()
				delete(c.firing, slot)
				c.firingMu.Unlock()
				close(done)
			}, nil
		}
		c.firingMu.Unlock()
		if !wait {
			return nil, errSlotBusy
		}
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("prescient: fire slot %s: waiting for this server's firing of it to end: %w",
				slot.Format(time.RFC3339), ctx.Err())
		}
	}
}

// heldSlots returns the slots the client is firing, oldest first.
func (c *Client) heldSlots() []time.Time {
	c.firingMu.Lock()
	defer c.firingMu.Unlock()
	return slices.SortedFunc(maps.Keys(c.firing), time.Time.Compare)
}

// slotHasDue reports whether any job is still due in slot, or the store
// could not say, for a firing that was stopped.
func (c *Client) slotHasDue(hard context.Context, slot time.Time) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(hard), stopTimeout)
	defer cancel()
	due, err := c.drv.JobsDue(ctx, &driver.JobsDueParams{Slot: slot, Limit: 1})
	return err != nil || len(due) > 0
}

// ledgerStart records in the ledger that this server fires slot, and returns
// the record this firing fills in: SlotFinish adds what it did to what
// earlier firings of the slot by this server counted, in the store, so that
// two processes firing one slot under one name both count.
func (c *Client) ledgerStart(ctx context.Context, slot time.Time, kind string) (*SlotRecord, error) {
	rec := &SlotRecord{Slot: slot, Server: c.cfg.Server, Kind: kind, StartedAt: c.now()}
	if err := c.drv.SlotStart(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// dispatch lists the jobs due in slot page by page, splits each page into
// groups (see plan) and runs up to Workers groups at once, each in its own
// transaction, adding what each did to t as it ends. It returns what the
// groups did, the jobs of unknown checks per check name, and what cut the
// firing short, if anything did.
func (c *Client) dispatch(work, hard context.Context, slot time.Time, t *firingTally) (did *SlotRecord, unknown map[string]int, cut error) {
	unknown = make(map[string]int)
	var (
		wg    sync.WaitGroup
		errs  []error
		after int64
	)
	tally := func(r *SlotRecord, err error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.did.Add(r)
		if err != nil {
			errs = append(errs, err)
		}
	}
	left, counted, err := c.unfinished(work, nil)
	if err != nil {
		c.storeError(StoreOpAttempts, err)
		return did, unknown, fmt.Errorf("list attempts left unfinished: %w", err)
	}
	countUnknown := func(unk map[string]int) {
		for name, n := range unk {
			unknown[name] += n
			tally(&SlotRecord{Unknown: n}, nil)
		}
	}
	// The first checks of a slot start at once, not after the claims of
	// whole batches that every worker would begin together at the boundary
	// (a batch check of 1,000 started 150 ms late): the first page is small,
	// and its first group claims its jobs before any other group starts.
	page := min(c.pageSize(), firstPage)
	first := true
list:
	for work.Err() == nil {
		due, err := c.drv.JobsDue(work, &driver.JobsDueParams{Slot: slot, AfterID: after, Limit: page})
		page = c.pageSize()
		if err != nil && work.Err() != nil {
			break // stopped while listing: fireSlot asks what is left
		}
		if err != nil {
			c.storeError(StoreOpJobsDue, err)
			tally(nil, fmt.Errorf("list due jobs: %w", err))
			break
		}
		if len(due) == 0 {
			break
		}
		after = due[len(due)-1].ID
		due, suspects, alone, condemned := sortUnfinished(due, left, c.cfg.MaxUnfinished)
		if len(alone) > 0 || len(condemned) > 0 {
			// Alone: no other group of the slot runs meanwhile.
			wg.Wait()
			// The attempts were counted when the slot started; those of
			// other servers' groups may have ended since. Count them
			// again before a job ends failed or runs alone: those still
			// left of the ones counted then (one recorded since is most
			// likely another server's group still running; a crash it
			// stands for counts at the next firing).
			if left, _, err = c.unfinished(work, counted); err != nil {
				c.storeError(StoreOpAttempts, err)
				tally(nil, fmt.Errorf("list attempts left unfinished: %w", err))
				break
			}
			var clean, more []*driver.DueJob
			clean, more, alone, condemned = sortUnfinished(slices.Concat(alone, condemned), left, c.cfg.MaxUnfinished)
			due, suspects = mergeByID(due, clean), mergeByID(suspects, more)
			if !c.runAlone(work, hard, slot, alone, condemned, left, tally, countUnknown) {
				break
			}
		}
		groups, unk := plan(due, c.cfg.Checks.Lookup, c.cfg.Workers, c.cfg.GroupSize, c.cfg.BatchSize)
		countUnknown(unk)
		// Suspects one more crash would not condemn: a group each.
		for _, d := range suspects {
			gs, unk := plan([]*driver.DueJob{d}, c.cfg.Checks.Lookup, 1, 1, 1)
			countUnknown(unk)
			for _, g := range gs {
				g.settle = true
				groups = append(groups, g)
			}
		}
		for _, g := range groups {
			select {
			case c.sem <- struct{}{}:
			case <-work.Done():
				break list
			}
			if first {
				g.claimed = make(chan struct{})
			}
			wg.Go(func() {
				defer func() { <-c.sem }()
				unlock := c.lockAlone(work, false) // see runAlone
				defer unlock()
				tally(c.runGroup(inGroup(c, work), inGroup(c, hard), slot, g))
			})
			if first {
				first = false
				select {
				case <-g.claimed:
				case <-work.Done():
					break list
				}
			}
		}
	}
	wg.Wait()
	return t.snapshot(), unknown, joinFew(errs)
}

// runAlone ends the condemned jobs as failed, then runs each of the alone
// jobs by itself, one after the other (see unfinished.go): with no other
// group of this client running, of this slot or of another (a sweep, a
// catch-up, FireSlot), so that a crash then names that job and no other.
// It reports false if work ended.
func (c *Client) runAlone(work, hard context.Context, slot time.Time, alone, condemned []*driver.DueJob, left leftBehind,
	tally func(*SlotRecord, error), countUnknown func(map[string]int)) bool {
	run := func(g group, exclusive bool) bool {
		select {
		case c.sem <- struct{}{}:
		case <-work.Done():
			return false
		}
		defer func() { <-c.sem }()
		unlock := c.lockAlone(work, exclusive)
		defer unlock()
		tally(c.runGroup(inGroup(c, work), inGroup(c, hard), slot, g))
		return work.Err() == nil
	}
	if len(condemned) > 0 {
		ids := make([]int64, len(condemned))
		for i, d := range condemned {
			ids[i] = d.ID
		}
		if !run(group{ids: ids, condemned: left.sure}, false) {
			return false
		}
	}
	for _, d := range alone {
		c.log.Info("running alone a job whose check started and never finished before", "id", d.ID, "check", d.Check,
			"attempts", left.all[d.ID], "max_unfinished", c.cfg.MaxUnfinished)
		groups, unk := plan([]*driver.DueJob{d}, c.cfg.Checks.Lookup, 1, 1, 1)
		countUnknown(unk)
		for _, g := range groups {
			g.settle = true
			if !run(g, true) {
				return false
			}
		}
	}
	return true
}

// inGroupKey marks the contexts of a group's checks (inGroup): a check that
// fires a slot, sweeps or ticks on its own client passes one on.
type inGroupKey struct{ c *Client }

// inGroup returns ctx marked as the context of a group of c's checks.
func inGroup(c *Client, ctx context.Context) context.Context {
	return context.WithValue(ctx, inGroupKey{c}, true)
}

// lockAlone takes c.alone for a group about to run (for writing when the
// group is a job run alone) and returns its release. A firing nested in a
// check of c's (ctx marked by inGroup) takes nothing: the check's own group
// holds the lock for reading, so a write lock would wait for its own
// caller, and a second read lock for any write lock pending. Such a job
// then runs alone within its slot only, as it did before the lock.
func (c *Client) lockAlone(ctx context.Context, exclusive bool) (unlock func()) {
	if ctx.Value(inGroupKey{c}) != nil {
		return func() {}
	}
	if exclusive {
		c.alone.Lock()
		return c.alone.Unlock
	}
	c.alone.RLock()
	return c.alone.RUnlock
}

// mergeByID merges two lists of due jobs into one in id order: the order
// groups claim their jobs in.
func mergeByID(a, b []*driver.DueJob) []*driver.DueJob {
	if len(b) == 0 {
		return a
	}
	m := slices.Concat(a, b)
	slices.SortFunc(m, func(x, y *driver.DueJob) int { return cmp.Compare(x.ID, y.ID) })
	return m
}

// joinFew joins the first few of errs and counts the rest: a slot whose
// groups all fail the same way says so once, not once per group.
func joinFew(errs []error) error {
	const few = 3
	if len(errs) <= few {
		return errors.Join(errs...)
	}
	return errors.Join(append(errs[:few:few], fmt.Errorf("and %d more like these", len(errs)-few))...)
}

// firstPage caps the first page dispatch lists of a slot.
const firstPage = 100

// pageSize is how many due jobs dispatch lists at a time: enough to give
// every worker a group, within [100, 10000].
func (c *Client) pageSize() int {
	return min(max(c.cfg.Workers*c.cfg.GroupSize, c.cfg.BatchSize, 100), 10_000)
}

// A group is what one transaction claims and runs: up to groupSize jobs of
// single-job checks (of any names), run one after the other, or one call's
// worth of jobs of one batch check.
type group struct {
	ids []int64
	// batch is the batch check of the group's jobs; nil for single-job checks.
	batch *checks.Check
	// claimed, if set, is closed once the group's first transaction has
	// claimed its jobs (or failed to).
	claimed chan struct{}
	// settle says the group's jobs are suspects run alone: the attempts left
	// behind that name them end when the group commits.
	settle bool
	// condemned, if set, holds the attempts left behind per job: the group's
	// jobs end failed without running (see unfinished.go).
	condemned map[int64]int
}

// plan splits due jobs, in id order, into groups: the jobs of single-job
// checks into groups of at most groupSize, but small enough to give each of
// the workers a group (a group runs its checks one after the other, so 16
// slow checks in one group would take 16 times as long as in 16), and the
// jobs of each batch check into groups of its batch size
// (checks.Opts.BatchSize, else batchSize). Jobs whose check lookup does not
// know are left out and counted per check name.
func plan(due []*driver.DueJob, lookup func(string) (*checks.Check, bool), workers, groupSize, batchSize int) (groups []group, unknown map[string]int) {
	var single []int64
	batches := make(map[string][]int64)
	var order []*checks.Check // batch checks, in first-seen order
	unknown = make(map[string]int)
	for _, d := range due {
		ch, ok := lookup(d.Check)
		switch {
		case !ok:
			unknown[d.Check]++
		case ch.Batch == nil:
			single = append(single, d.ID)
		default:
			if _, seen := batches[ch.Name]; !seen {
				order = append(order, ch)
			}
			batches[ch.Name] = append(batches[ch.Name], d.ID)
		}
	}
	size := min(groupSize, max((len(single)+workers-1)/workers, 1))
	for ids := range chunks(single, size) {
		groups = append(groups, group{ids: ids})
	}
	for _, ch := range order {
		size := batchSize
		if ch.Opts.BatchSize > 0 {
			size = ch.Opts.BatchSize
		}
		for ids := range chunks(batches[ch.Name], size) {
			groups = append(groups, group{ids: ids, batch: ch})
		}
	}
	return groups, unknown
}

// chunks yields ids in slices of at most size.
func chunks(ids []int64, size int) func(func([]int64) bool) {
	return func(yield func([]int64) bool) {
		for len(ids) > 0 {
			n := min(size, len(ids))
			if !yield(ids[:n:n]) {
				return
			}
			ids = ids[n:]
		}
	}
}

// unknownWarnEvery is how often the warning for jobs of a check this server
// does not run is repeated, per check, while the jobs stay pending: each
// sweep finds them again (every 5 minutes by default, every few seconds on
// a fast grid), and warned each time the log filled with the same line
// (found by a trial of the SQL API, where a misspelt name is not refused).
const unknownWarnEvery = time.Hour

// noteUnknown records the jobs of unknown checks a firing of slot left
// pending, and warns of them: once per check every unknownWarnEvery, and at
// debug level between.
func (c *Client) noteUnknown(slot time.Time, m map[string]int) {
	if len(m) == 0 {
		return
	}
	now := c.now()
	c.unknownMu.Lock()
	defer c.unknownMu.Unlock()
	maps.Copy(c.unknown, m)
	for check, n := range m {
		if last, ok := c.unknownWarned[check]; ok && now.Sub(last) < unknownWarnEvery && !now.Before(last) {
			c.log.Debug("jobs left pending: no check registered under this name", "check", check, "jobs", n, "slot", slot)
			continue
		}
		c.unknownWarned[check] = now
		c.log.Warn("jobs left pending: no check registered under this name (warned again hourly while they stay pending)",
			"check", check, "jobs", n, "slot", slot)
	}
}

// KnownChecks returns, sorted, the names of the checks this client runs
// (its registry) and of those the servers that started on the database
// recorded (the check catalog). A job of any other check waits for a server
// that runs it, which may never come (a misspelt name): the CLI's schedule
// warns of one, and the HTTP API refuses it.
func (c *Client) KnownChecks(ctx context.Context) ([]string, error) {
	entries, err := c.drv.CatalogList(ctx)
	if err != nil {
		return nil, fmt.Errorf("prescient: read the check catalog: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Check)
	}
	for _, ch := range c.cfg.Checks.All() {
		names = append(names, ch.Name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// UnknownCheckError is KnownCheck's error for a check that neither the
// client runs nor any server recorded.
type UnknownCheckError struct {
	Check string
	// Known are the checks that are known (KnownChecks).
	Known []string
}

func (e *UnknownCheckError) Error() string {
	known := "none yet"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("no server runs a check named %q (known checks: %s)", e.Check, known)
}

// KnownCheck returns nil when KnownChecks holds check, and otherwise an
// *UnknownCheckError.
func (c *Client) KnownCheck(ctx context.Context, check string) error {
	names, err := c.KnownChecks(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(names, check) {
		return nil
	}
	return &UnknownCheckError{Check: check, Known: names}
}

// UnknownChecks returns the check names this server found due jobs for but
// has no check registered under, with the jobs seen in the last slot that
// had them. Those jobs stay pending. A name registered since is left out
// (the registry may grow while the client runs), and forgotten.
func (c *Client) UnknownChecks() map[string]int {
	c.unknownMu.Lock()
	defer c.unknownMu.Unlock()
	for name := range c.unknown {
		if _, ok := c.cfg.Checks.Lookup(name); ok {
			delete(c.unknown, name)
		}
	}
	return maps.Clone(c.unknown)
}
