package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/prescient-dev/prescient"
)

// Defaults of Opts.
const (
	// MaxBodyDefault is the largest request body accepted when Opts.MaxBody
	// is 0: room for a payload of prescient.PayloadMax and the other fields,
	// escaped, with plenty to spare.
	MaxBodyDefault = 1 << 20
	// TimeoutDefault bounds the store work of one request when Opts.Timeout
	// is 0. An SQLite write may wait this long for the write lock, which a
	// group of checks holds while it runs.
	TimeoutDefault = 30 * time.Second
)

// Opts configure the handler New returns.
type Opts struct {
	// Token is the bearer token every request must carry. An empty Token
	// matches no request: every request is refused with 401, so that a
	// handler built without a token is never open.
	Token string
	// MaxBody is the largest request body accepted, in bytes; a larger one
	// is refused with 413. 0 means MaxBodyDefault.
	MaxBody int64
	// Timeout bounds the store work of one request; a request that takes
	// longer is answered 503. 0 means TimeoutDefault. The http.Server that
	// serves the handler should allow at least this long to write.
	Timeout time.Duration
	// Logger receives the store errors behind 5xx answers. Nil means
	// slog.Default().
	Logger *slog.Logger
	// AllowUnknownChecks lets POST /v1/schedule schedule a check that
	// neither the client's registry nor the check catalog (the checks every
	// server that started recorded) knows. By default that is refused with
	// 400: the job of a misspelt check would wait for a server that never
	// comes. Set it when the servers that run a check may start after its
	// first jobs are scheduled.
	AllowUnknownChecks bool
}

// api serves one client.
type api struct {
	client *prescient.Client
	opts   Opts
	// token is the SHA-256 of Opts.Token: comparing digests of equal length
	// tells a caller nothing about the token's length either.
	token [sha256.Size]byte
}

// routes lists the endpoints, for the error a request to any other path
// gets.
const routes = "POST /v1/schedule, POST /v1/cancel, POST /v1/resolve, GET /v1/jobs/{entity}/{key} and GET /v1/history"

// New returns the HTTP handler of the API over client (see the package
// documentation). opts may be nil, but without a Token every request is
// refused. The handler is safe for concurrent use; client need not be
// started (a pure scheduling client serves every endpoint).
func New(client *prescient.Client, opts *Opts) http.Handler {
	var o Opts
	if opts != nil {
		o = *opts
	}
	if o.MaxBody <= 0 {
		o.MaxBody = MaxBodyDefault
	}
	if o.Timeout <= 0 {
		o.Timeout = TimeoutDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &api{client: client, opts: o, token: sha256.Sum256([]byte(o.Token))}
	mux := http.NewServeMux()
	jobs := a.route(http.MethodGet, a.jobs)
	// Patterns without a method, so that a wrong method is answered by
	// route, in JSON, rather than by the mux in text.
	mux.Handle("/v1/schedule", a.route(http.MethodPost, a.schedule))
	mux.Handle("/v1/cancel", a.route(http.MethodPost, a.cancel))
	mux.Handle("/v1/resolve", a.route(http.MethodPost, a.resolve))
	mux.Handle("/v1/jobs/{entity}/{key...}", jobs)
	mux.Handle("/v1/history", a.route(http.MethodGet, a.history))
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{Status: http.StatusNotFound,
			Message: fmt.Sprintf("no route %s %s: the routes are %s", clip(r.Method), clip(r.URL.EscapedPath()), routes)})
	})
	mux.Handle("/", notFound)
	// Without it the mux would redirect /v1/jobs/order to /v1/jobs/order/,
	// a job list of the empty key.
	mux.Handle("/v1/jobs/{entity}", notFound)
	return a.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/v1/jobs/"); ok && strings.HasSuffix(rest, "/") && strings.Count(rest, "/") > 1 {
			escaped := r.URL.EscapedPath()
			// Most likely a slash typed after the key: read as part of
			// it, the answer was an empty job list, as for a key with no
			// jobs (found by a trial of bad input).
			writeError(w, &apiError{Status: http.StatusNotFound,
				Message: fmt.Sprintf("no route %s %s: the path ends in '/': write /v1/jobs/{entity}/{key} without it (a key that ends in '/' is written %%2F: url.PathEscape, jq's @uri)", clip(r.Method), clip(escaped))})
			return
		}
		if entity, key, ok := dotKey(r.URL.EscapedPath()); ok {
			r.SetPathValue("entity", entity)
			r.SetPathValue("key", key)
			jobs.ServeHTTP(w, r)
			return
		}
		if escaped := r.URL.EscapedPath(); cleanPath(escaped) != escaped {
			// The mux would answer with a redirect in HTML (and a POST's
			// client would not follow it with its body): every answer is
			// JSON, and a route is written one way.
			how := "write the path as " + clip(cleanPath(escaped))
			if strings.HasPrefix(escaped, "/v1/jobs/") {
				// Cleaned, the path would name another job.
				how = "percent-encode the entity and the key (a key holding '/' as %2F: url.PathEscape, jq's @uri)"
			}
			writeError(w, &apiError{Status: http.StatusNotFound,
				Message: fmt.Sprintf("no route %s %s: %s (the routes are %s)", clip(r.Method), clip(escaped), how, routes)})
			return
		}
		mux.ServeHTTP(w, r)
	}))
}

// cleanPath is p as the mux routes it: no empty, "." or ".." segment, and
// a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean
}

// Unavailable returns a handler that stands in for the API while its
// client cannot serve yet (a server waiting for its database at start-up):
// it refuses a request without opts.Token with 401, as New's handler does,
// and answers any other with 503, Retry-After: 5 and message as the error.
func Unavailable(opts *Opts, message string) http.Handler {
	var o Opts
	if opts != nil {
		o = *opts
	}
	a := &api{opts: o, token: sha256.Sum256([]byte(o.Token))}
	return a.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Message: message})
	}))
}

// dotKey splits a path /v1/jobs/ENTITY/KEY whose key holds a "." or ".."
// segment, which the mux would clean away (answering with a redirect to
// another route): such a key is valid, so the path goes to jobs as it is.
func dotKey(escaped string) (entity, key string, ok bool) {
	rest, found := strings.CutPrefix(escaped, "/v1/jobs/")
	if !found {
		return "", "", false
	}
	segs := strings.Split(rest, "/")
	if len(segs) < 2 || !slices.ContainsFunc(segs[1:], func(s string) bool { return s == "." || s == ".." }) {
		return "", "", false
	}
	entity, err := url.PathUnescape(segs[0])
	if err != nil {
		return "", "", false
	}
	key, err = url.PathUnescape(strings.Join(segs[1:], "/"))
	if err != nil {
		return "", "", false
	}
	return entity, key, true
}

// authenticate refuses, with 401, every request that does not carry the
// token, before next sees it: a caller without the token learns nothing,
// not even which routes exist.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, token, _ := strings.Cut(h, " ")
		var msg string
		switch {
		case h == "":
			msg = "no bearer token: send the header Authorization: Bearer TOKEN"
		case !strings.EqualFold(scheme, "Bearer"):
			msg = "the Authorization header must be Bearer TOKEN"
		case !a.tokenOK(strings.TrimSpace(token)):
			msg = "the bearer token is not valid"
		default:
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="prescient"`)
		writeError(w, &apiError{Status: http.StatusUnauthorized, Message: msg})
	})
}

// tokenOK compares token with Opts.Token in constant time.
func (a *api) tokenOK(token string) bool {
	if a.opts.Token == "" {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
}

// endpoint serves one request: it returns the status and the value to write
// as JSON, or an error (an *apiError, or a store error from the client).
type endpoint func(ctx context.Context, r *http.Request) (int, any, error)

// route serves e for requests of method and answers 405 to any other, and
// writes what e returns.
func (a *api) route(method string, e endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HEAD is GET without the body (net/http drops what is written).
		if head := r.Method == http.MethodHead && method == http.MethodGet; r.Method != method && !head {
			if method == http.MethodGet {
				w.Header().Set("Allow", "GET, HEAD")
			} else {
				w.Header().Set("Allow", method)
			}
			writeError(w, &apiError{Status: http.StatusMethodNotAllowed,
				Message: fmt.Sprintf("%s is not allowed on %s: use %s", clip(r.Method), clip(r.URL.EscapedPath()), method)})
			return
		}
		// Reading past the cap fails, and tells the server to close the
		// connection rather than read the rest.
		r.Body = http.MaxBytesReader(w, r.Body, a.opts.MaxBody)
		ctx, cancel := context.WithTimeout(r.Context(), a.opts.Timeout)
		defer cancel()
		status, v, err := e(ctx, r)
		if err != nil {
			writeError(w, a.failure(r, err))
			return
		}
		writeJSON(w, status, v)
	})
}

// failure turns what an endpoint returned into the error to answer: an
// *apiError as it is; anything else came from the store, and is logged and
// answered without its text, which may name the database's user, host or
// schema.
func (a *api) failure(r *http.Request, err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	op := strings.TrimPrefix(r.URL.Path, "/v1/")
	if i := strings.IndexByte(op, '/'); i >= 0 {
		op = op[:i]
	}
	a.opts.Logger.Error("api: store failed", "method", r.Method, "path", r.URL.Path, "error", err)
	switch {
	case errors.Is(err, prescient.ErrNotMigrated):
		// The sentinel's own text, which says what to do and names nothing.
		return &apiError{Status: http.StatusInternalServerError,
			Message: fmt.Sprintf("%s failed: %s", op, strings.TrimPrefix(prescient.ErrNotMigrated.Error(), "prescient: "))}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusServiceUnavailable,
			Message: fmt.Sprintf("%s failed: the store did not answer within %s; try again (details in the server's log)", op, a.opts.Timeout)}
	case errors.Is(err, context.Canceled):
		return &apiError{Status: http.StatusServiceUnavailable, Message: op + " failed: the request was cancelled"}
	}
	return &apiError{Status: http.StatusInternalServerError,
		Message: op + " failed: the store failed (details in the server's log)"}
}
