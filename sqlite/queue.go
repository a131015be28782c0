package sqlite

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// A queue is the write queue of one database file, shared by the Stores of
// every process that opens it: a lock file beside the database (its path
// with "-queue" added), which a Store holds from before it begins a write
// transaction until SQLite has given it the write lock.
//
// SQLite's own wait for the write lock (the busy handler) polls. A server
// hands the lock from one group of checks to the next at once, so without
// the queue a write from another process (an application's Schedule, a CLI
// command, a second server's heartbeat or group) met the lock taken again
// at nearly every poll, and could wait for the server's whole run of
// groups, failing with "database is locked" after its busy timeout though
// each group was short. With the queue, the waiting write holds the queue's
// lock, so the server's next group waits behind it: the write waits for the
// group running now only, and processes that contend take turns.
//
// Within a process, a Store's write lock (lockWrite) is taken first, so one
// goroutine of a Store at a time uses the queue. Writers that do not use
// this package (the sqlite3 shell, another language's driver) do not queue
// and still meet SQLite's busy handler alone; where the lock file cannot be
// opened (a directory this process cannot write), or the platform has no
// file locks, Stores write as they did before it existed.
type queue struct {
	path string
	mu   sync.Mutex
	done bool     // the lock file was opened, or could not be, or the queue closed
	f    *os.File // nil: no queue (see above)
}

// queueSuffix is added to the database's path to name its queue's lock file.
const queueSuffix = "-queue"

// queuePollMax bounds the wait between two tries of the queue's lock.
const queuePollMax = 10 * time.Millisecond

func newQueue(dbPath string) *queue { return &queue{path: dbPath + queueSuffix} }

// file opens the lock file on first use, with the database file's
// permissions (as SQLite creates its -wal and -shm files), and returns it,
// or nil when it cannot be opened.
func (q *queue) file() *os.File {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.done {
		q.done = true
		mode := os.FileMode(0o644)
		if fi, err := os.Stat(q.path[:len(q.path)-len(queueSuffix)]); err == nil {
			mode = fi.Mode().Perm()
		}
		f, err := os.OpenFile(q.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
		if err == nil {
			_ = f.Chmod(mode) // past the umask, as SQLite does for its files
		} else {
			f, err = os.OpenFile(q.path, os.O_RDWR, 0)
		}
		if err == nil {
			q.f = f
		}
	}
	return q.f
}

// enter waits for the queue's lock, at most limit (0: as long as ctx
// lasts), and returns its release. A write calls it before it begins its
// transaction and leaves once the transaction has begun.
func (q *queue) enter(ctx context.Context, limit time.Duration) (leave func(), err error) {
	f := q.file()
	if f == nil {
		return func() {}, nil
	}
	var deadline <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		deadline = t.C
	}
	wait := time.Millisecond
	for {
		locked, err := tryLockFile(f)
		if err != nil {
			return func() {}, nil // no file locks here: write as without the queue
		}
		if locked {
			return func() { unlockFile(f) }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			return nil, fmt.Errorf("sqlite: database is locked: waited %s in the write queue %s behind a write of another process", limit, q.path)
		case <-time.After(wait):
		}
		wait = min(2*wait, queuePollMax)
	}
}

// close closes the lock file, if a write opened it (a Store that only
// read leaves none behind).
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done = true
	if q.f != nil {
		q.f.Close()
	}
}
