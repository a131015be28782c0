//go:build !unix && !windows

package sqlite

import (
	"errors"
	"os"
)

// tryLockFile: this platform has no file locks, so there is no queue.
func tryLockFile(*os.File) (bool, error) { return false, errors.ErrUnsupported }

func unlockFile(*os.File) {}
