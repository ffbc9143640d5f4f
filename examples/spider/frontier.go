package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// frontier is the crawl's state, shared by every crawler process through
// a directory, with no service of its own:
//
//	seen/<h>     a URL someone found; its content is the URL
//	claimed/<h>  the URL is being (or was) fetched by one process
//	done/<h>     its fetch is over, and the links it found are in seen/
//
// where <h> is the hex SHA-256 of the URL. A file is created at most once:
// claimed/ and done/ with O_CREATE|O_EXCL, seen/ by hard-linking a
// complete temporary file (link fails if the name exists), so that no one
// reads a half-written URL. Both are atomic between processes on one
// host, which makes each URL claimed — and so fetched — exactly once.
//
// Limitations: the directory must be on a local file system (or one whose
// exclusive create and link are atomic across its clients; older NFS is
// not); and a URL claimed by a process that died before marking it done is
// neither fetched again nor lets the crawl end: crawl again with a fresh
// directory.
type frontier struct {
	dir string
	// claimed remembers names known to be claimed, by anyone, so that a
	// scan does not try them again.
	claimed map[string]bool
}

// openFrontier opens (creating if needed) the state directory dir.
func openFrontier(dir string) (*frontier, error) {
	for _, sub := range []string{"seen", "claimed", "done", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	return &frontier{dir: dir, claimed: make(map[string]bool)}, nil
}

func hashURL(u string) string {
	h := sha256.Sum256([]byte(u))
	return hex.EncodeToString(h[:])
}

// add records that u was found. It reports whether u was new.
func (f *frontier) add(u string) (bool, error) {
	tmp, err := os.CreateTemp(filepath.Join(f.dir, "tmp"), "seen-")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(u); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	err = os.Link(tmp.Name(), filepath.Join(f.dir, "seen", hashURL(u)))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrExist):
		return false, nil
	}
	return false, err
}

// claim claims a URL that was found and not yet claimed, for this process
// to fetch. It returns "" when there is none now.
func (f *frontier) claim() (string, error) {
	seen, err := os.ReadDir(filepath.Join(f.dir, "seen"))
	if err != nil {
		return "", err
	}
	for _, e := range seen {
		name := e.Name()
		if f.claimed[name] {
			continue
		}
		c, err := os.OpenFile(filepath.Join(f.dir, "claimed", name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			f.claimed[name] = true // someone else's
			continue
		}
		if err != nil {
			return "", err
		}
		_, werr := c.WriteString(strconv.Itoa(os.Getpid()) + "\n")
		if err := errors.Join(werr, c.Close()); err != nil {
			return "", err
		}
		f.claimed[name] = true
		u, err := os.ReadFile(filepath.Join(f.dir, "seen", name))
		if err != nil {
			return "", err
		}
		return string(u), nil
	}
	return "", nil
}

// done marks the fetch of u over; result is recorded for people ("ok" or
// an error). Call it after adding the links found on u's page.
func (f *frontier) done(u, result string) error {
	d, err := os.OpenFile(filepath.Join(f.dir, "done", hashURL(u)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("marking %s done: %w", u, err)
	}
	_, werr := d.WriteString(result + "\n")
	return errors.Join(werr, d.Close())
}

// complete reports whether the crawl is over: every URL found has been
// fetched. It reads done/ before seen/: a fetch adds its links to seen/
// before it marks itself done, so a done/ entry read here means its links
// are in the seen/ read after it; and the crawl is over when every seen
// URL is done (no fetch is in progress, and none can add more).
func (f *frontier) complete() (bool, error) {
	done, err := os.ReadDir(filepath.Join(f.dir, "done"))
	if err != nil {
		return false, err
	}
	seen, err := os.ReadDir(filepath.Join(f.dir, "seen"))
	if err != nil {
		return false, err
	}
	isDone := make(map[string]bool, len(done))
	for _, e := range done {
		isDone[e.Name()] = true
	}
	for _, e := range seen {
		if !isDone[e.Name()] {
			return false, nil
		}
	}
	return true, nil
}
