// Package statuspage serves a read-only web page about a prescient server:
// a timeline of slots (the jobs due in the upcoming ones; the lag, duration
// and outcomes of the ones fired, incomplete ones highlighted), the servers
// with their heartbeats and positions, the jobs pending per check and the
// checks no server knows, recent history with filters, and one job's detail.
//
// Everything it serves is in the binary (html/template pages and one
// stylesheet, embedded); it fetches nothing from elsewhere, and its Content
// Security Policy forbids the browser to. It answers GET and HEAD only and
// writes nothing to the store.
//
// Every read it makes is bounded: the ledger, history and pending-job lists
// by a limit on an index, the servers and the catalog by their size. The
// exceptions are the counts (jobs pending per slot and per check, overdue
// jobs, outcomes of the last day), which Client.Status reads by counting the
// pending table and a day of history (about two seconds over a million
// pending jobs): the page reads them at most once per Opts.CacheFor,
// whatever the number of viewers, in the background while it shows the
// previous reading, and says when they were read.
//
//	http.Handle("/", statuspage.New(client, nil))
//
// The pages are "/" (the overview), "/history" (filters in the query:
// entity, key, check, outcome, limit) and "/job" (entity, key and,
// optionally, check in the query); "/static/" holds the stylesheet. Links are
// relative, so the page also works mounted under a prefix with
// http.StripPrefix. Any other path is 404, so the handler can sit at "/" of
// a mux whose other patterns (/healthz, /metrics) are more specific.
package statuspage

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prescient-dev/prescient"
)

// Defaults for Opts.
const (
	// CacheForDefault is how long one reading of the counts serves pages.
	CacheForDefault = 5 * time.Second
	// ReadTimeoutDefault bounds the store reads of one page.
	ReadTimeoutDefault = 10 * time.Second
	// UpcomingDefault is how many upcoming slots with jobs the timeline lists.
	UpcomingDefault = 12
	// FiredDefault is how many ledger rows the timeline lists.
	FiredDefault = 24
	// RecentDefault is how many history records the overview lists.
	RecentDefault = 10
	// RefreshDefault is how often the overview reloads itself.
	RefreshDefault = 15 * time.Second
	// HistoryLimitDefault and HistoryLimitMax bound the rows of /history.
	HistoryLimitDefault = 50
	HistoryLimitMax     = 1000
	// JobRowsMax caps the pending jobs and the history records /job lists.
	JobRowsMax = 100
	// ConcurrentDefault is how many page loads read the store at once.
	ConcurrentDefault = 4
)

// Opts tune a status page. The zero value of each field means its default.
type Opts struct {
	// CacheFor is how long one reading of the counts (Client.Status: pending
	// jobs per upcoming slot and per check, overdue jobs, outcomes of the
	// last 24 hours) serves page loads; the page shows when they were read.
	// A load after it shows the last reading (if it is less than a minute
	// old) while a new one is read in the background. Page loads otherwise
	// run only bounded queries. -1 reads the counts at every load, and the
	// load waits for them. Default CacheForDefault.
	CacheFor time.Duration
	// ReadTimeout bounds the store reads of one page load; a section whose
	// read fails or times out says so and the rest of the page is shown.
	// Default ReadTimeoutDefault.
	ReadTimeout time.Duration
	// Upcoming is how many upcoming slots that have jobs the timeline lists.
	// Default UpcomingDefault.
	Upcoming int
	// Fired is how many ledger rows (the latest) the timeline lists. Default
	// FiredDefault.
	Fired int
	// Recent is how many of the latest history records the overview lists.
	// Default RecentDefault.
	Recent int
	// Refresh is how often the overview reloads itself in the browser; -1
	// never. Default RefreshDefault.
	Refresh time.Duration
	// Concurrent is how many page loads read the store at once; more wait
	// for one to end, up to ReadTimeout, then get 503. It bounds what the
	// page, often served without authentication, takes of the store's
	// connections and of memory. Default ConcurrentDefault.
	Concurrent int
	// Logger receives the errors of failed reads, which the page itself
	// does not show (they may name the database's host and user). Default
	// slog.Default().
	Logger *slog.Logger

	// now is the clock of the counts cache; time.Now when nil.
	now func() time.Time
}

func (o *Opts) withDefaults() Opts {
	var c Opts
	if o != nil {
		c = *o
	}
	if c.CacheFor == 0 {
		c.CacheFor = CacheForDefault
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = ReadTimeoutDefault
	}
	if c.Upcoming <= 0 {
		c.Upcoming = UpcomingDefault
	}
	if c.Fired <= 0 {
		c.Fired = FiredDefault
	}
	c.Fired = min(c.Fired, prescient.SlotsLimitMax) // Client.Slots refuses more
	if c.Recent <= 0 {
		c.Recent = RecentDefault
	}
	if c.Refresh == 0 {
		c.Refresh = RefreshDefault
	}
	if c.Concurrent <= 0 {
		c.Concurrent = ConcurrentDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

//go:embed assets
var assets embed.FS

// page is the handler New returns.
type page struct {
	client *prescient.Client
	opts   Opts
	pages  map[string]*template.Template
	mux    *http.ServeMux
	// loads holds a token per page load reading the store (see limited).
	loads chan struct{}

	countsMu sync.Mutex
	counts   *counts       // the latest reading of the counts
	reading  chan struct{} // while a reading runs: closed when it ends
}

// New returns the status page of client, which need not be started (a page
// of a client that is not running shows no server of its own). opts may be
// nil for all defaults.
func New(client *prescient.Client, opts *Opts) http.Handler {
	p := &page{client: client, opts: opts.withDefaults(), pages: make(map[string]*template.Template)}
	p.loads = make(chan struct{}, p.opts.Concurrent)
	for _, name := range []string{"overview", "history", "job", "error"} {
		p.pages[name] = template.Must(template.New(name).Funcs(funcs).
			ParseFS(assets, "assets/layout.html", "assets/"+name+".html"))
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("GET /{$}", p.limited(p.overview))
	p.mux.HandleFunc("GET /history", p.limited(p.history))
	p.mux.HandleFunc("GET /job", p.limited(p.job))
	p.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	p.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed: the status page is read-only", http.StatusMethodNotAllowed)
			return
		}
		p.render(w, r, http.StatusNotFound, "error", p.errorPage(r, "Not found", "There is no page at "+r.URL.Path+"."))
	})
	return p
}

// csp allows the page's own stylesheet and nothing else: no script, no
// font, no request to any other host.
const csp = "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func (p *page) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	p.mux.ServeHTTP(w, r)
}

// limited runs h once fewer than Opts.Concurrent page loads read the store,
// waiting up to Opts.ReadTimeout for one to end, else answers 503: twenty
// loads of 1,000 history records at once took a server from 165 MB to
// 1.25 GB (found by a security review).
func (p *page) limited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		wait := time.NewTimer(p.opts.ReadTimeout)
		defer wait.Stop()
		select {
		case p.loads <- struct{}{}:
			defer func() { <-p.loads }()
			h(w, r)
		case <-wait.C:
			w.Header().Set("Retry-After", "5")
			http.Error(w, "the status page is busy: other page loads are reading the database; try again in a few seconds", http.StatusServiceUnavailable)
		case <-r.Context().Done():
		}
	}
}

// render executes the page template name with data into a buffer first, so
// that a template error becomes a 500, not half a page.
func (p *page) render(w http.ResponseWriter, r *http.Request, code int, name string, data any) {
	var buf bytes.Buffer
	if err := p.pages[name].ExecuteTemplate(&buf, "page", data); err != nil {
		p.opts.Logger.Error("status page: render", "page", name, "path", r.URL.Path, "error", err)
		http.Error(w, "the status page failed to render (details in the server's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// readCtx bounds the reads of one page load.
func (p *page) readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), p.opts.ReadTimeout)
}

// failed logs a read that failed and returns the message the page shows in
// its place: not the error itself, which may name the database's host and
// user.
func (p *page) failed(r *http.Request, what string, err error) string {
	p.opts.Logger.Warn("status page: read failed", "read", what, "path", r.URL.Path, "error", err)
	return "Could not read " + what + " (details in the server's log)."
}
