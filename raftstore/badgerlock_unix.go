//go:build !windows && !plan9 && !js && !wasip1 && !aix

package raftstore

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// lockBadgerDir takes the lock Badger holds on its directory for as long
// as a DB is open there (flock, exclusive, on the directory itself). ok is
// false when the directory does not exist or another holder has it (a
// live DB: badger.Open will refuse the directory too); unlock releases it.
func lockBadgerDir(dir string) (unlock func(), ok bool, err error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return func() { _ = f.Close() }, true, nil // closing the descriptor releases the lock
}
