package statuspage

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestPageLoadsAreLimited: no more than Opts.Concurrent page loads read the
// store at once; one more waits up to ReadTimeout, then gets 503, and is
// served once a load ends (found by a security review: twenty loads of
// 1,000 history records at once took a server from 165 MB to 1.25 GB).
func TestPageLoadsAreLimited(t *testing.T) {
	st := stores[1].open(t) // sqlite: the limit is the page's, whatever the store
	f := newFixture(t, st)
	h := New(f.client, &Opts{Concurrent: 1, ReadTimeout: 300 * time.Millisecond, CacheFor: -1})
	p := h.(*page)
	p.loads <- struct{}{} // a load under way
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, path := range []string{"/", "/history", "/job?entity=order&key=1&check=greet"} {
		code, hdr, body := get(t, srv, path)
		if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Errorf("GET %s with the one load allowed under way: %d (Retry-After %q), want 503 saying to retry:\n%s", path, code, hdr.Get("Retry-After"), body)
		}
	}
	<-p.loads // it ends
	for _, path := range []string{"/", "/history", "/static/style.css"} {
		if code, _, _ := get(t, srv, path); code != http.StatusOK {
			t.Errorf("GET %s once no load is under way: %d, want 200", path, code)
		}
	}
	p.loads <- struct{}{}
	defer func() { <-p.loads }()
	if code, _, _ := get(t, srv, "/static/style.css"); code != http.StatusOK {
		t.Errorf("GET /static/style.css with a load under way: %d, want 200 (it reads no database)", code)
	}
}
