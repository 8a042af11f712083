//go:build unix

package filelock

import (
	"os"
	"syscall"
)

// Lock takes an exclusive lock on the file at path, creating it, and
// returns its release. The kernel releases it too if the process dies, so
// a killed test binary never leaves the cache locked.
func Lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return func() { f.Close() }, nil
}
