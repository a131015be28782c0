package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestHistoryInvalidNameIs400: Client.History now refuses a name no
// job can have with a plain error, which the API's failure() does not know:
// GET /v1/history?entity=Order%20X (a client's typo) answers 500 "the store
// failed" and logs "api: store failed", where the other bad parameters of
// the same route answer 400 naming the field.
func TestHistoryInvalidNameIs400(t *testing.T) {
	eachStore(t, nil, func(t *testing.T, e *apiEnv) {
		for _, path := range []string{
			"/v1/history?entity=Order%20X",
			"/v1/history?entity=order&key=a%09b",
			"/v1/history?check=no%20such",
		} {
			res := e.do("GET", path, nil)
			if res.status != http.StatusBadRequest {
				t.Errorf("GET %s: status %d, want 400; body %s", path, res.status, res.body)
			}
		}
		if strings.Contains(e.log.String(), "store failed") {
			t.Errorf("a client's bad name logged as a store failure:\n%s", e.log.String())
		}
	})
}
