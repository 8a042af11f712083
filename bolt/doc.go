// Package reboundbolt keeps the journal of `rebound batch` in one file on
// the machine that runs it, with bbolt.
//
// A batch of a hundred thousand requests runs for hours, and something
// stops it sooner or later: a deploy, an OOM kill, a laptop lid, a quota
// that ran out. The journal is what makes stopping cheap. It knows, for
// every item of the batch, whether it is waiting, out on the wire, or
// answered, and it holds every answer; the next run over the same input
// picks up where the last one stopped and never sends again what
// succeeded. A *Journal is a batch.Journal: Prepare ties it to the input,
// Claim hands items out in input order, Record writes each outcome as it
// comes, Outcomes reads them back for the output file.
//
// # Why bbolt
//
// The journal needs a file that is always whole: a record either is there
// or is not, whatever moment the process dies at. bbolt gives exactly that
// and little else: a B+tree in one file, read through mmap, written in
// transactions that are atomic and isolated, with a file lock so that one
// process at a time writes it. It is small, pure Go (no cgo, so rebound
// still cross-compiles to one static binary) and has been etcd's storage
// for a decade. SQLite through modernc.org/sqlite would do the job too,
// but it is a far larger dependency (a C library translated to Go, which
// slows every build of the command), and the journal asks no question SQL
// would help with: it looks items up by position and walks them in order.
//
// # Layout
//
// Three buckets: "rebound-journal" holds the format version, the input's
// digest and its number of items; "items" holds, for each item keyed by
// its input position (4 bytes, big-endian, so that a cursor walks input
// order), its state, a Resent flag and its custom_id; "outcomes" holds
// each item's last outcome, under the same keys, body last; it stays while
// the item is sent again, until a new one replaces it. Prepare and Counts read only
// the small "items" entries. A file of a newer format is refused
// (ErrNewerFormat) rather than misread; a file that is not a journal
// (ErrNotJournal) and a damaged one (ErrCorrupt) are told apart in
// one-line errors that name the file.
//
// # Damaged files
//
// bbolt trusts its file: a page past the end of a file cut short is a
// SIGBUS, a page id changed by one flipped byte an assertion, and when it
// opens a file for writing it walks every page in goroutines of its own,
// where no recover reaches. So Open first opens the file read only and
// reads, with ReadAt and bounds checks, every page that bbolt may reach
// from the meta page it chose: each lies in the file and is reached once,
// is of the type its place wants, and holds its elements, keys in order,
// and buckets in its bounds (the rules of bbolt's own Tx.Check, which
// itself reads through the memory map). A file that fails is ErrCorrupt,
// naming the file and what is wrong; one that passes cannot take bbolt
// out of its pages. It reads the file 64 pages at a time, and adds a
// little to bbolt's own walk of the tree at Open (BenchmarkOpen). As a
// last line, the journal's reads and writes turn a panic of bbolt's, or a
// fault of the memory map (a disk that cannot read a page, a file cut by
// another program), into ErrCorrupt; bbolt may then hold its locks, so
// the journal answers ErrCorrupt from then on without calling it.
//
// # Writing fast
//
// A run at thousands of requests a second records thousands of outcomes a
// second, each from its own worker goroutine. One goroutine owns all
// writing: the Records (and Claims) waiting when it begins a transaction
// share it, so that a commit, whatever it costs, is paid once for many
// outcomes, and a lone Record still commits at once, waiting on no timer.
// Claim takes items from a queue kept in memory, built by Prepare: the run
// is the file's only writer, so memory and file cannot drift apart, and
// no Claim scans the items.
//
// # Durability
//
// A Record that returned nil is in the file, and stays there if the
// process is killed at any moment after (SIGKILL, an OOM kill, a panic).
// By default the journal does not fsync. It does not need to for that
// promise: a bbolt commit writes the transaction's pages with pwrite into
// pages no committed tree uses, then writes the meta page that points at
// the new tree. Once pwrite returns, the data is the kernel's (its page
// cache), not the process's, and a process that dies leaves it to be
// written back all the same. A kill between the pages and the meta page
// leaves the old meta page pointing at the old, whole tree; the meta page
// is one page, carries a checksum, and bbolt keeps two of them, falling
// back to the other if one is bad. So the file opens as of the last
// commit. What this does not survive is the machine losing power or the
// kernel crashing before it has written the pages back: the disk may then
// hold the new meta page without the pages it points at. Config.Sync
// buys that too, at the price of an fdatasync per commit (see
// BenchmarkJournal: group commit keeps the price per outcome small, but
// it depends on the disk). The freelist is not written at each commit
// either (bbolt's NoFreelistSync); Open rebuilds it from the tree.
//
// A run that dies leaves its claims InFlight in the file. The next Prepare
// hands them out again with Resent set: the request may have reached the
// provider, and the run can say so. Close gives them back at once.
//
// # The lock
//
// bbolt holds an flock on the file while it is open: one run at a time.
// A second run fails after Config.LockTimeout with ErrInUse, naming the
// file, instead of waiting behind the first. The kernel lets go of the
// lock when the process holding it dies, however it dies, so a killed
// run never leaves a stale lock behind, and no lease is needed.
//
// A reader opens the journal with Config.ReadOnly: a shared lock, so
// several readers (`rebound batch status`) may read together, without
// creating or changing the file. A shared lock still excludes the run's
// exclusive one, so status cannot read a journal while a run holds it; a
// run reports its own progress, and status answers between runs. (Reading
// under a run would need the run to publish its counts elsewhere, or a
// file format that tolerates a reader without a lock; bbolt's does not.)
package reboundbolt
