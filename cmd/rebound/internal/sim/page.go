package sim

import (
	"bytes"
	"errors"
	"os"
)

// Page is the file of charts "rebound sim --html" writes, opened before
// the run so that a page that cannot be written fails it before it
// starts.
type Page struct {
	f *os.File
	// created says the run created the file, so that a run that fails
	// leaves no empty page behind (and an existing one untouched).
	created bool
}

// OpenPage opens path for writing without changing it yet.
func OpenPage(path string) (*Page, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return &Page{f: f, created: true}, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	f, err = os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &Page{f: f}, nil
}

// Write replaces the page with the charts, and closes it.
func (p *Page) Write(title string, charts []Chart) error {
	var b bytes.Buffer
	err := WriteHTML(&b, title, charts)
	if err == nil {
		err = p.f.Truncate(0)
	}
	if err == nil {
		_, err = p.f.Write(b.Bytes())
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil && p.created {
		os.Remove(p.f.Name())
	}
	return err
}

// Discard closes the page of a run that failed, removing it if the run
// created it. A nil page is none.
func (p *Page) Discard() {
	if p == nil {
		return
	}
	p.f.Close()
	if p.created {
		os.Remove(p.f.Name())
	}
}
