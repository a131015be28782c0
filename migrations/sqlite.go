package migrations

import "embed"

// SQLite holds the SQLite migrations under the directory "sqlite". They create
// the same tables as the PostgreSQL migrations (all named prescient_…), with
// times as INTEGER microseconds since the Unix epoch (UTC), durations as
// INTEGER microseconds in columns ending _us and JSON as TEXT. SQLite has no
// SQL functions callable from other languages' transactions, so there is no
// prescient_schedule, prescient_cancel or prescient_resolve here.
//
//go:embed sqlite/*.sql
var SQLite embed.FS
