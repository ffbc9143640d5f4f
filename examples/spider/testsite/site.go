// Package testsite is a small generated web site for the spider example
// and its test: pages that link to each other, each taking a while to
// serve, and a record of how the site was crawled — the most requests
// served at once, and how many times each page was fetched — so that a
// test can check a crawler's limits from the site's side.
package testsite

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StatsPath is the path of the site's statistics (JSON of Stats). Requests
// for it are not counted.
const StatsPath = "/_stats"

// Site is an http.Handler serving pages "/" and "/page/1.html" to
// "/page/N.html". Every page is reachable from "/": "/" links to pages 1 to
// 3, and page i links to pages 2i, 2i+1 and i+1 (those that exist), back to
// "/", and to a few links a crawler must not follow or must normalise (an
// external host, a fragment, a mailto: link, a relative path). Each page
// takes Delay to serve. Site is safe for concurrent use.
type Site struct {
	pages int
	delay time.Duration

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	fetches     map[string]int
}

// Stats is what a Site recorded.
type Stats struct {
	// MaxInFlight is the most page requests that were being served at
	// once.
	MaxInFlight int `json:"max_in_flight"`
	// Fetches counts the requests of each path, including paths that are
	// not pages (which get 404).
	Fetches map[string]int `json:"fetches"`
}

// New returns a site of pages pages (plus "/"), each served after delay.
func New(pages int, delay time.Duration) *Site {
	return &Site{pages: pages, delay: delay, fetches: make(map[string]int)}
}

// Paths returns the path of every page, "/" first.
func (s *Site) Paths() []string {
	paths := []string{"/"}
	for i := 1; i <= s.pages; i++ {
		paths = append(paths, pagePath(i))
	}
	return paths
}

// Stats returns a copy of what the site recorded so far.
func (s *Site) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{MaxInFlight: s.maxInFlight, Fetches: make(map[string]int, len(s.fetches))}
	for p, n := range s.fetches {
		st.Fetches[p] = n
	}
	return st
}

// ServeHTTP serves a page after the site's delay, counting it while it is
// being served, or the site's Stats at StatsPath.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == StatsPath {
		st := s.Stats()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
		return
	}
	s.mu.Lock()
	s.fetches[r.URL.Path]++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	body, ok := s.page(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	select {
	case <-time.After(s.delay):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(body))
}

// page returns the HTML of the page at path.
func (s *Site) page(path string) (string, bool) {
	var links []string
	title := "Home"
	switch {
	case path == "/":
		for i := 1; i <= min(3, s.pages); i++ {
			links = append(links, pagePath(i))
		}
	case strings.HasPrefix(path, "/page/") && strings.HasSuffix(path, ".html"):
		i, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(path, "/page/"), ".html"))
		if err != nil || i < 1 || i > s.pages || pagePath(i) != path {
			return "", false
		}
		title = fmt.Sprintf("Page %d", i)
		for _, j := range []int{2 * i, 2*i + 1, i + 1} {
			if j <= s.pages {
				// Relative links, which the crawler must resolve.
				links = append(links, fmt.Sprintf("%d.html", j))
			}
		}
		links = append(links, "../", "#top", "mailto:someone@example.invalid",
			"http://example.invalid/elsewhere.html", fmt.Sprintf("/page/%d.html#section", i))
	default:
		return "", false
	}
	sort.Strings(links)
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html>\n<html><head><title>%s</title></head><body>\n<h1 id=\"top\">%s</h1>\n<ul>\n", title, title)
	for _, l := range links {
		fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a></li>\n", html.EscapeString(l), html.EscapeString(l))
	}
	b.WriteString("</ul>\n</body></html>\n")
	return b.String(), true
}

func pagePath(i int) string { return fmt.Sprintf("/page/%d.html", i) }
