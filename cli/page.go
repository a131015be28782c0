package cli

import (
	"log/slog"
	"net/http"
	"sync"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/statuspage"
)

// mountStatusPage serves the status page (package statuspage: the timeline
// of slots, the servers, the pending jobs per check, history and each
// job's detail) at "/" of mux, for `run` on http.listen. It takes every
// path the mux's other patterns (/healthz, /readyz, /metrics) do not, and
// answers 404 for those that are not its pages. Until ready holds a started
// client it answers 503 "starting".
func mountStatusPage(mux *http.ServeMux, ready *startupReadier, log *slog.Logger) {
	// "/" without a method: more general than "GET /metrics" and "/metrics"
	// alike, so that it conflicts with no pattern mounted beside it.
	mux.Handle("/", &pageHandler{ready: ready, log: log})
}

// pageHandler builds the status page of the client once it has started.
type pageHandler struct {
	ready *startupReadier
	log   *slog.Logger

	mu     sync.Mutex
	client *prescient.Client
	page   http.Handler
}

func (h *pageHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.ready.mu.Lock()
	c := h.ready.client
	h.ready.mu.Unlock()
	if c == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "starting: the status page is served once the server has started (see /readyz)", http.StatusServiceUnavailable)
		return
	}
	h.mu.Lock()
	if h.client != c {
		h.client, h.page = c, statuspage.New(c, &statuspage.Opts{Logger: h.log})
	}
	page := h.page
	h.mu.Unlock()
	page.ServeHTTP(w, r)
}
