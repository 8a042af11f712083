//go:build !unix

package npmserver

// lock does nothing where there is no flock: processes that install at
// once each run npm, and the rename into place lets the first one win.
func lock(string) (unlock func(), err error) { return func() {}, nil }
