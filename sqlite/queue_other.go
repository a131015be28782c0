//go:build !unix && !windows

package sqlite

import (
	"errors"
	"os"
)

// lockFile: this platform has no file locks, so there is no queue.
func lockFile(*os.File, bool) (bool, error) { return false, errors.ErrUnsupported }

func unlockFile(*os.File) {}

func ownLike(*os.File, os.FileInfo) {}
