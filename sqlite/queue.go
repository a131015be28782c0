package sqlite

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// A queue lets the writes waiting in other processes go before this
// process's next group of checks. It is a lock file beside the database (its
// path with "-queue" added) shared by the Stores of every process that
// opens the database:
//
//   - a write (Store.begin, WriteTx) and a processing transaction (Begin)
//     announce that they wait for the database's write lock by holding the
//     file's lock shared, from before their BEGIN until it returns. Any
//     number of waiters hold it at once: announcing never waits;
//   - one that got the lock counts a turn taken, in the file's first eight
//     bytes, before it lets go of the file;
//   - a processing transaction first yields to the waiters of other
//     processes: while any holds the file shared, it waits until one of
//     them has taken its turn, or at most yieldMax, then goes on.
//
// SQLite's own wait for the write lock (the busy handler) polls, sleeping up
// to 100 ms between tries. A server hands the lock from one group of checks
// to the next at once, so without the queue a write from another process (an
// application's Schedule, a CLI command, a second server's heartbeat or
// group) met the lock taken again at nearly every try, could wait for the
// server's whole run of groups, and failed with "database is locked" after
// its busy timeout though each group was short. With the queue, the server
// holds its next group back until a waiting write has taken the lock: the
// write waits for the group running now only. Writes do not yield to one
// another, nor to a group waiting for them: several processes that only
// write share the lock as before, and a process that writes without pause
// may hold a server's groups back (its writes going first); a slot of 5,000
// quick checks took 1.1 to 5 s beside one scheduling 4,700 jobs a second,
// 0.5 s without the queue, where that process's writes waited up to 0.4 s
// each and, behind slow checks, failed. Nothing waits on a waiter: a
// process stopped while it waits (Ctrl-Z, a paused container) costs each of
// the server's groups yieldMax until it resumes or exits, and stalls no one.
//
// Within a process, a Store's write lock (lockWrite) is taken first, so one
// goroutine of a Store at a time uses the file. Writers that do not use this
// package (the sqlite3 shell, another language's driver) do not announce
// themselves and still meet SQLite's busy handler alone; where the lock file
// cannot be opened, or the platform has no file locks, Stores write as they
// did before the queue existed.
type queue struct {
	path string
	mu   sync.Mutex
	done bool     // the lock file was opened, or could not be, or the queue closed
	f    *os.File // nil: no queue (see above)
}

const (
	// queueSuffix is added to the database's path to name the lock file.
	queueSuffix = "-queue"
	// yieldMax bounds how long a processing transaction lets the writes of
	// other processes go first: more than SQLite's busy handler sleeps
	// between two tries (100 ms), so that a write that has waited long
	// still tries once while the lock is free.
	yieldMax = 250 * time.Millisecond
	// queuePollMax bounds the wait between two looks at the lock file.
	queuePollMax = 5 * time.Millisecond
)

// newQueue returns the queue of the database file at dbPath. SQLite keeps
// its -wal and -shm files beside the file a symbolic link names, and so does
// the queue, so that a Store opened through a link queues with one opened by
// the file's own path.
func newQueue(dbPath string) *queue {
	if p, err := filepath.EvalSymlinks(dbPath); err == nil {
		dbPath = p
	}
	return &queue{path: dbPath + queueSuffix}
}

// file opens the lock file on first use and returns it, or nil when it
// cannot be opened. It creates the file as SQLite creates its -wal and -shm
// files: with the database file's mode, past the umask, and, when this
// process runs as root, its owner. A file it can only read serves as well:
// file locks do not need write access.
func (q *queue) file() *os.File {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return q.f
	}
	q.done = true
	db, dbErr := os.Stat(q.path[:len(q.path)-len(queueSuffix)])
	mode := os.FileMode(0o644)
	if dbErr == nil {
		mode = db.Mode().Perm()
	}
	f, err := os.OpenFile(q.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, mode)
	if err == nil {
		_ = f.Chmod(mode)
		if dbErr == nil {
			ownLike(f, db)
		}
	} else if f, err = os.OpenFile(q.path, os.O_RDWR, 0); err != nil {
		f, err = os.Open(q.path)
	}
	if err == nil {
		q.f = f
	}
	return q.f
}

// announce holds the lock file shared until leave: this Store waits for the
// database's write lock. Call leave with whether it got the lock, to count
// the turn taken. If the file is locked exclusively for longer than a look
// takes (a process stopped in the middle of yield's look), it does not
// announce, and the write waits as without the queue.
func (q *queue) announce() (leave func(took bool)) {
	f := q.file()
	if f == nil {
		return func(bool) {}
	}
	wait := 100 * time.Microsecond
	for range 10 {
		locked, err := lockFile(f, false)
		if err != nil {
			return func(bool) {}
		}
		if locked {
			return func(took bool) {
				if took {
					// Holding the database's write lock: no other Store
					// counts at the same time.
					var b [8]byte
					_, _ = f.ReadAt(b[:], 0)
					binary.LittleEndian.PutUint64(b[:], binary.LittleEndian.Uint64(b[:])+1)
					_, _ = f.WriteAt(b[:], 0)
				}
				unlockFile(f)
			}
		}
		time.Sleep(wait) // another Store looks at the file: it lets go at once
		wait *= 2
	}
	return func(bool) {}
}

// turns reads the count of turns taken.
func turns(f *os.File) uint64 {
	var b [8]byte
	if _, err := f.ReadAt(b[:], 0); err != nil {
		return 0
	}
	return binary.LittleEndian.Uint64(b[:])
}

// yield waits while other Stores announce that they wait, until one of them
// has taken its turn, at most yieldMax, or until ctx ends.
func (q *queue) yield(ctx context.Context, limit time.Duration) error {
	f := q.file()
	if f == nil {
		return nil
	}
	deadline := time.Now().Add(limit)
	before := turns(f)
	wait := 500 * time.Microsecond
	for {
		locked, err := lockFile(f, true)
		if err != nil {
			return nil
		}
		if locked {
			unlockFile(f)
			return nil
		}
		if turns(f) != before || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, queuePollMax)
	}
}

// close closes the lock file, if a write opened it (a Store that only read
// leaves none behind).
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done = true
	if q.f != nil {
		q.f.Close()
	}
}
