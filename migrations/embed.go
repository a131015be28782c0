// Package migrations holds the SQL that creates and evolves prescient's schema,
// embedded in the binary so that `prescient migrate` and Store.Migrate need no
// files on disk. Each store applies its own directory with goose; the files are
// numbered goose SQL migrations and are never edited once released, only
// followed by new ones.
package migrations

import "embed"

// Postgres holds the PostgreSQL migrations under the directory "postgres".
// They create the tables (all named prescient_…), their indexes and the SQL
// functions prescient_schedule, prescient_cancel and prescient_resolve, in the
// first schema of the connection's search_path.
//
//go:embed postgres/*.sql
var Postgres embed.FS
