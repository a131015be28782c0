package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// Keys "." and ".." are valid keys (ValidateKey takes them; POST
// /v1/schedule schedules them), and the README says to percent-encode a
// key for GET /v1/jobs/{entity}/{key} (jq's @uri, url.PathEscape), which
// leaves dots as they are. The mux cleans such a path: the answer was a 307
// redirect in text/html (not JSON) to /v1/jobs/order or /v1/jobs, which a
// client that follows it got as 404 "no route", never the job.
func TestJobsOfDotKeys(t *testing.T) {
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, key := range []string{".", "..", "a/..", "./b"} {
			var j job
			e.ok(http.StatusCreated, "POST", "/v1/schedule", map[string]any{"entity": "order", "key": key, "check": "order_unshipped", "in": "3h"}, &j)
			for _, path := range []string{url.PathEscape(key), key} {
				req, err := http.NewRequest("GET", e.url+"/v1/jobs/order/"+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Authorization", "Bearer "+token)
				res, err := noFollow.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				var list struct{ Jobs []job }
				if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" ||
					json.Unmarshal(body, &list) != nil || len(list.Jobs) != 1 || list.Jobs[0].Key != key {
					t.Errorf("GET /v1/jobs/order/%s for the pending job of key %q: %d %s (Location %q) %s; want 200 and the job",
						path, key, res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Location"), body)
				}
			}
		}
	})
}
