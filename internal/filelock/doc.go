// Package filelock holds an exclusive lock on a file across processes,
// so that test binaries that install something into a shared cache (an
// npm package, a browser) at the same time wait for one install rather
// than each running the installer. The kernel releases the lock when the
// process dies, so a killed test binary never leaves it held.
package filelock
