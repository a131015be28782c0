package delivery

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The headers of a webhook request.
const (
	// HeaderSignature carries "t=<unix seconds>,v1=<hex>": v1 is the
	// HMAC-SHA256, keyed with the sink's secret, of the timestamp, a ".",
	// and the request body exactly as received.
	HeaderSignature = "Prescient-Signature"
	// HeaderIdempotencyKey carries the event's idempotency key,
	// entity/key/check/stage, the same for every attempt and every server:
	// a receiver deduplicates on it.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderEventID carries the event's id in the outbox.
	HeaderEventID = "Prescient-Event-Id"
	// HeaderAttempt carries the number of the attempt, 1 for the first.
	HeaderAttempt = "Prescient-Attempt"
)

// Webhook POSTs each event as JSON (the Event, see its fields' json names)
// to URL, signed with Secret (see HeaderSignature). A 2xx answer delivers
// the event. Any other answer, a redirect included (redirects are not
// followed: the signature is for URL), and a timeout or a failed
// connection are retried until the sink's attempts are used up: a 4xx is
// retried too, since it usually means a receiver being deployed or
// reconfigured (a 404 during a deploy, a 401 while a secret is rotated)
// rather than an event it can never take; a receiver that wants an event
// dropped answers 2xx. A Retry-After header (seconds or an HTTP date) on a
// failed answer makes the retry wait at least that long.
type Webhook struct {
	URL    string
	Secret []byte
	// Client sends the requests; nil means one that does not follow
	// redirects. The attempt's context carries the sink's timeout.
	Client *http.Client
	// Now stamps the signatures. Default time.Now.
	Now func() time.Time
}

// errorBodyMax is how much of a failed answer's body the delivery's last
// error keeps.
const errorBodyMax = 512

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// Deliver POSTs d's event.
func (w *Webhook) Deliver(ctx context.Context, d *Delivery) (int, error) {
	body, err := json.Marshal(d.Event)
	if err != nil {
		return 0, fmt.Errorf("encode event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, errors.New("the sink's URL is not valid") // the URL may hold a token: not quoted
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "prescient-webhook")
	req.Header.Set(HeaderIdempotencyKey, d.Event.IdempotencyKey)
	req.Header.Set(HeaderEventID, strconv.FormatInt(d.Event.ID, 10))
	req.Header.Set(HeaderAttempt, strconv.Itoa(d.Attempts))
	req.Header.Set(HeaderSignature, Sign(w.Secret, now(), body))
	client := w.Client
	if client == nil {
		client = noRedirects
	}
	resp, err := client.Do(req)
	if err != nil {
		// url.Error quotes the URL, which may hold a token.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("POST %s: no answer before the sink's timeout (%v)", hostOf(w.URL), err)
		}
		return 0, fmt.Errorf("POST %s: %w", hostOf(w.URL), err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, &StatusError{
		Status:     resp.StatusCode,
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(snippet), "?")),
		retryAfter: retryAfter(resp.Header.Get("Retry-After"), now()),
	}
}

// hostOf returns the scheme and host of a URL, for errors: its path and
// query may hold a token.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the sink's URL"
	}
	return u.Scheme + "://" + u.Host
}

// StatusError is a webhook's answer other than 2xx.
type StatusError struct {
	Status int
	// Body is the start of the answer's body.
	Body       string
	retryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// RetryAfter is the wait the answer's Retry-After header asked for, or 0.
func (e *StatusError) RetryAfter() time.Duration { return e.retryAfter }

// retryAfter parses a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Sign returns the value of the HeaderSignature header for body, sent at t:
// "t=<unix seconds>,v1=<hex of HMAC-SHA256(secret, "<unix seconds>." + body)>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a HeaderSignature header value against body and secret, as a
// receiver written in Go may: the signature must match and its timestamp be
// within tolerance of now (a replayed old request is refused).
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs [][]byte
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.New("signature header: want t=<unix seconds>,v1=<hex>")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature timestamp is %s away from now, more than %s", d.Abs(), tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errors.New("signature does not match")
}
