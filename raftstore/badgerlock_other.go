//go:build windows || plan9 || js || wasip1 || aix

package raftstore

// lockBadgerDir: on these platforms Badger's directory lock is not an
// flock this package can share, so it never reports the lock taken and
// openBadger leaves the directory as it is.
func lockBadgerDir(string) (unlock func(), ok bool, err error) { return nil, false, nil }
