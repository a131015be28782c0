// Package httpapi serves prescient's client over HTTP as a small JSON API,
// for applications in languages, or on stores, that the SQL functions
// (PostgreSQL only) do not reach. `prescient run` serves it on api.listen;
// an application can mount New's handler in its own server instead.
//
// Every request carries the bearer token (Authorization: Bearer TOKEN); the
// token is compared in constant time, and a request without it, or with
// another, is refused with 401 before anything else is looked at. The
// endpoints are the Go client's calls, with its validation and its
// idempotence:
//
//	POST /v1/schedule            Client.Schedule: 201 and the job when it was not pending, 200 and the job when it was
//	POST /v1/cancel              Client.Cancel: {"cancelled": n}
//	POST /v1/resolve             Client.Resolve: {"resolved": n}
//	GET  /v1/jobs/{entity}/{key} Client.Jobs of one entity key: {"jobs": [...]}, soonest due first
//	GET  /v1/history?...         Client.History: {"records": [...]}, newest first
//
// A POST body is one JSON object (Content-Type: application/json) of at most
// Opts.MaxBody bytes, with no field the endpoint does not know and nothing
// after it. Every response is JSON. A request that cannot be served is
// answered with a 4xx and a body saying what was wrong and, when one field
// or query parameter was, which:
//
//	{"error": "entity order: key must be 1 to 512 bytes, got 0", "field": "key"}
//
// 400 bad input, 401 no or wrong token, 404 no such route, 405 wrong method
// (with an Allow header), 408 body stalled past the server's
// http.Server.ReadTimeout, 413 body too large, 415 body not JSON. A 5xx
// means the store failed (500) or did not answer within Opts.Timeout (503);
// its body says which call failed and never quotes the store's error, which
// may name the database's user, host or schema: the error goes to
// Opts.Logger instead.
package httpapi
