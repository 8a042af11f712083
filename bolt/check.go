package reboundbolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"

	bolt "go.etcd.io/bbolt"
)

// bbolt trusts its file: it reads pages through a memory map without
// bounds, asserts with panics, and walks the whole tree in goroutines of
// its own when it opens a file for writing (to rebuild the freelist). A
// damaged file then crashes the process, and no recover can stop it: a
// page past the end of a cut file is a SIGBUS, a page id changed by a
// flipped byte an assertion in a goroutine that is not ours. So before
// bbolt reads anything but the meta pages, checkFile reads every page that
// bbolt may reach, with ReadAt and bounds checks, and holds it to what
// bbolt takes for granted. What it accepts, bbolt's own walks and cursors
// read without leaving the file. (bbolt's Tx.Check would not do: it runs
// in a goroutine of its own, reading the pages it checks through the map.)
//
// The layout is bbolt's format version 2, in the machine's byte order:
//
//	page header: id uint64, flags uint16, count uint16, overflow uint32
//	branch element: pos uint32, ksize uint32, pgid uint64
//	leaf element: flags uint32, pos uint32, ksize uint32, vsize uint32
//	meta (after the header): magic, version, pageSize, flags uint32;
//	    root bucket (root pgid, sequence uint64); freelist, pgid (the
//	    high water mark), txid, checksum uint64
//
// An element's key starts pos bytes after the element itself, its value
// right after the key. A bucket is a leaf value with the bucket flag: its
// root page id and sequence, then, when the root id is 0 (an inline
// bucket), a leaf page of its own.
const (
	pageHeaderSize   = 16
	elementSize      = 16 // branch and leaf elements alike
	bucketHeaderSize = 16

	branchPage   = 0x01
	leafPage     = 0x02
	freelistPage = 0x10
	bucketFlag   = 0x01

	boltMagic   = 0xED0CDAED
	boltVersion = 2
	noFreelist  = ^uint64(0)
	metaSize    = 64 // the checksum covers the 56 bytes before it
	minPageSize = 1024
)

// checkFile checks the pages of the bbolt file f that db, opened read only
// on it, has chosen a meta page of: the tree of that meta page and its
// freelist, if it has one. It returns what is wrong, in a few words.
func checkFile(f *os.File, db *bolt.DB) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pageSize := uint64(db.Info().PageSize)
	if pageSize < minPageSize {
		return fmt.Errorf("a page size of %d bytes", pageSize)
	}
	tx, err := db.Begin(false)
	if err != nil {
		return err
	}
	txid := uint64(tx.ID())
	tx.Rollback()

	// The meta page bbolt chose is the valid one with its transaction id.
	var m *meta
	for id := range uint64(2) {
		b := make([]byte, pageHeaderSize+metaSize)
		if _, err := f.ReadAt(b, int64(id*pageSize)); err != nil {
			return fmt.Errorf("reading meta page %d: %v", id, err)
		}
		if mm := readMeta(b[pageHeaderSize:]); mm.valid && mm.txid == txid {
			m = &mm
			break
		}
	}
	if m == nil {
		return fmt.Errorf("no meta page of transaction %d", txid)
	}
	pages := uint64(st.Size()) / pageSize
	if m.pgid > pages {
		return fmt.Errorf("the file is cut short: it has %d pages of %d", pages, m.pgid)
	}
	c := &checker{r: f, pageSize: pageSize, pages: m.pgid, seen: make([]uint64, (m.pgid+63)/64)}
	if _, err := c.tree(m.root, nil, nil); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		return c.freelist(m.freelist)
	}
	return nil
}

type meta struct {
	valid                      bool
	root, freelist, pgid, txid uint64
}

// readMeta reads a meta page's fields after its header, as bbolt's
// Meta.Validate judges them.
func readMeta(b []byte) meta {
	le := binary.NativeEndian
	h := fnv.New64a()
	h.Write(b[:56])
	return meta{
		valid:    le.Uint32(b[0:]) == boltMagic && le.Uint32(b[4:]) == boltVersion && le.Uint64(b[56:]) == h.Sum64(),
		root:     le.Uint64(b[16:]),
		freelist: le.Uint64(b[32:]),
		pgid:     le.Uint64(b[40:]),
		txid:     le.Uint64(b[48:]),
	}
}

// checker walks the pages of a file with pages pages of pageSize bytes.
type checker struct {
	r        io.ReaderAt
	pageSize uint64
	pages    uint64
	seen     []uint64 // a bit per page: reached already
	buf      []byte   // pages from..from+n of the file
	from, n  uint64
}

// window returns page id's first page, read with the pages after it in
// the file, up to windowPages: a tree written in order lies in order.
func (c *checker) window(id uint64) ([]byte, error) {
	if id < c.from || id >= c.from+c.n {
		n := min(windowPages, c.pages-id)
		if cap(c.buf) < int(windowPages*c.pageSize) {
			c.buf = make([]byte, windowPages*c.pageSize)
		}
		if _, err := c.r.ReadAt(c.buf[:n*c.pageSize], int64(id*c.pageSize)); err != nil {
			c.n = 0
			return nil, fmt.Errorf("reading page %d: %v", id, err)
		}
		c.from, c.n = id, n
	}
	at := (id - c.from) * c.pageSize
	return c.buf[at : at+c.pageSize : at+c.pageSize], nil
}

// windowPages is how many pages the checker reads at a time.
const windowPages = 64

// page is a page as read: its header and the first bytes of its span,
// element table included.
type page struct {
	id, off, span uint64 // span: the bytes of the page and its overflow pages
	flags         uint16
	count         uint64
	head          []byte // the first bytes of the span, often checker.buf
	checker       *checker
}

// read reads page id, which must lie in the file and be reached once.
func (c *checker) read(id uint64, what string) (*page, error) {
	if id < 2 || id >= c.pages {
		return nil, fmt.Errorf("%s is page %d, outside the file's %d pages", what, id, c.pages)
	}
	off := id * c.pageSize
	head, err := c.window(id)
	if err != nil {
		return nil, err
	}
	le := binary.NativeEndian
	p := &page{id: id, off: off, flags: le.Uint16(head[8:]), count: uint64(le.Uint16(head[10:])), checker: c}
	overflow := uint64(le.Uint32(head[12:]))
	switch {
	case le.Uint64(head) != id:
		return nil, fmt.Errorf("page %d (%s) says it is page %d", id, what, le.Uint64(head))
	case overflow >= c.pages-id:
		return nil, fmt.Errorf("page %d (%s) runs %d pages past the file's end", id, what, overflow+1-(c.pages-id))
	}
	for i := id; i <= id+overflow; i++ {
		if c.seen[i/64]&(1<<(i%64)) != 0 {
			return nil, fmt.Errorf("page %d (%s) is reached twice", i, what)
		}
		c.seen[i/64] |= 1 << (i % 64)
	}
	p.span = (overflow + 1) * c.pageSize
	p.head = head
	return p, nil
}

// elements makes sure that the element table of p lies in its span and in
// p.head.
func (p *page) elements() error {
	end := pageHeaderSize + p.count*elementSize
	if end > p.span {
		return fmt.Errorf("page %d: %d elements do not fit in %d bytes", p.id, p.count, p.span)
	}
	if end > uint64(len(p.head)) {
		p.head = make([]byte, end)
		if _, err := p.checker.r.ReadAt(p.head, int64(p.off)); err != nil {
			return fmt.Errorf("reading page %d: %v", p.id, err)
		}
	}
	return nil
}

// within returns an error unless the n bytes at off lie in p's span.
func (p *page) within(off, n uint64) error {
	if off > p.span || n > p.span-off {
		return fmt.Errorf("page %d: an element's data runs past the page", p.id)
	}
	return nil
}

// bytes returns a copy of the n bytes at off in p's span.
func (p *page) bytes(off, n uint64) ([]byte, error) {
	if err := p.within(off, n); err != nil {
		return nil, err
	}
	if off+n <= uint64(len(p.head)) {
		return bytes.Clone(p.head[off : off+n]), nil
	}
	b := make([]byte, n)
	if _, err := p.checker.r.ReadAt(b, int64(p.off+off)); err != nil {
		return nil, fmt.Errorf("reading page %d: %v", p.id, err)
	}
	return b, nil
}

// tree checks the tree under page id, a bucket's root or a node under it,
// whose keys must lie in [low, high) (nil: no bound), and returns its
// largest key. The rules on keys are those of bbolt's own check, which
// its freelist rebuild panics on.
func (c *checker) tree(id uint64, low, high []byte) ([]byte, error) {
	p, err := c.read(id, "a node")
	if err != nil {
		return nil, err
	}
	if err := p.elements(); err != nil {
		return nil, err
	}
	le := binary.NativeEndian
	switch p.flags {
	case branchPage:
		if p.count == 0 {
			return nil, fmt.Errorf("page %d: a branch with no children", id)
		}
		keys := make([][]byte, p.count)
		children := make([]uint64, p.count)
		for i := range p.count {
			e := pageHeaderSize + i*elementSize
			pos, ksize := uint64(le.Uint32(p.head[e:])), uint64(le.Uint32(p.head[e+4:]))
			children[i] = le.Uint64(p.head[e+8:])
			if ksize == 0 {
				return nil, fmt.Errorf("page %d: an empty key", id)
			}
			if keys[i], err = p.bytes(e+pos, ksize); err != nil {
				return nil, err
			}
		}
		last := low
		for i, key := range keys {
			if err := keyOrder(id, i, key, last, high); err != nil {
				return nil, err
			}
			next := high
			if i+1 < len(keys) {
				next = keys[i+1]
			}
			if last, err = c.tree(children[i], key, next); err != nil {
				return nil, err
			}
		}
		return last, nil
	case leafPage:
		return c.leaf(p, low, high)
	}
	return nil, fmt.Errorf("page %d: a node of type %#x", id, p.flags)
}

// leaf checks the elements of a leaf page, and the buckets they hold.
func (c *checker) leaf(p *page, low, high []byte) ([]byte, error) {
	le := binary.NativeEndian
	var buckets [][]byte
	last := low
	for i := range p.count {
		e := pageHeaderSize + i*elementSize
		flags := le.Uint32(p.head[e:])
		pos, ksize, vsize := uint64(le.Uint32(p.head[e+4:])), uint64(le.Uint32(p.head[e+8:])), uint64(le.Uint32(p.head[e+12:]))
		if ksize == 0 {
			return nil, fmt.Errorf("page %d: an empty key", p.id)
		}
		key, err := p.bytes(e+pos, ksize)
		if err != nil {
			return nil, err
		}
		if err := keyOrder(p.id, int(i), key, last, high); err != nil {
			return nil, err
		}
		last = key
		if flags&bucketFlag == 0 {
			if err := p.within(e+pos+ksize, vsize); err != nil {
				return nil, err
			}
			continue
		}
		if p.id == 0 {
			return nil, fmt.Errorf("an inline bucket holds a bucket")
		}
		v, err := p.bytes(e+pos+ksize, vsize)
		if err != nil {
			return nil, err
		}
		buckets = append(buckets, v)
	}
	for _, v := range buckets {
		if err := c.bucket(v); err != nil {
			return nil, err
		}
	}
	return last, nil
}

// bucket checks a bucket, given its value in its parent.
func (c *checker) bucket(v []byte) error {
	if len(v) < bucketHeaderSize {
		return fmt.Errorf("a bucket header of %d bytes", len(v))
	}
	if root := binary.NativeEndian.Uint64(v); root != 0 {
		_, err := c.tree(root, nil, nil)
		return err
	}
	// An inline bucket: a leaf page in the value, its offsets relative to
	// the value.
	in := v[bucketHeaderSize:]
	if len(in) < pageHeaderSize {
		return fmt.Errorf("an inline bucket of %d bytes", len(in))
	}
	p := &page{span: uint64(len(in)), flags: binary.NativeEndian.Uint16(in[8:]), count: uint64(binary.NativeEndian.Uint16(in[10:])), head: in, checker: c}
	if p.flags != leafPage {
		return fmt.Errorf("an inline bucket of type %#x", p.flags)
	}
	if err := p.elements(); err != nil {
		return err
	}
	_, err := c.leaf(p, nil, nil)
	return err
}

// keyOrder checks key, the i-th of page id: above the previous one (at or
// above a branch's own key for the first), below high.
func keyOrder(id uint64, i int, key, last, high []byte) error {
	switch {
	case i == 0 && last != nil && bytes.Compare(last, key) > 0,
		i > 0 && bytes.Compare(last, key) >= 0,
		high != nil && bytes.Compare(key, high) >= 0:
		return fmt.Errorf("page %d: key %d out of order", id, i)
	}
	return nil
}

// freelist checks a freelist page: its ids lie in the file, each once,
// none of them a page of the tree.
func (c *checker) freelist(id uint64) error {
	p, err := c.read(id, "the freelist")
	if err != nil {
		return err
	}
	if p.flags != freelistPage {
		return fmt.Errorf("page %d: a freelist of type %#x", id, p.flags)
	}
	first, n := uint64(0), p.count
	if n == 0xFFFF { // the count is the first id's place
		b, err := p.bytes(pageHeaderSize, 8)
		if err != nil {
			return err
		}
		first, n = 1, binary.NativeEndian.Uint64(b)
	}
	if n > (p.span-pageHeaderSize)/8-first {
		return fmt.Errorf("page %d: %d free pages do not fit in it", id, n)
	}
	b, err := p.bytes(pageHeaderSize+first*8, n*8)
	if err != nil {
		return err
	}
	for i := range n {
		free := binary.NativeEndian.Uint64(b[i*8:])
		if free < 2 || free >= c.pages {
			return fmt.Errorf("the freelist holds page %d, outside the file's %d pages", free, c.pages)
		}
		if c.seen[free/64]&(1<<(free%64)) != 0 {
			return fmt.Errorf("the freelist holds page %d, which is in use or listed twice", free)
		}
		c.seen[free/64] |= 1 << (free % 64)
	}
	return nil
}
