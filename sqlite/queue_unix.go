//go:build unix

package sqlite

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes f's lock, exclusive or shared, if no other open file holds
// it in a way that conflicts.
func lockFile(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}

// unlockFile releases f's lock.
func unlockFile(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// ownLike gives f the owner of the database file db when this process runs
// as root, as SQLite does for its -wal and -shm files, so that the server's
// account can open a lock file that root's command created.
func ownLike(f *os.File, db os.FileInfo) {
	st, ok := db.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return
	}
	_ = f.Chown(int(st.Uid), int(st.Gid))
}
