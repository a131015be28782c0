// Package migrations holds the SQL that creates and evolves prescient's schema,
// embedded in the binary so that `prescient migrate` and Store.Migrate need no
// files on disk. Each store applies its own directory with goose; the files are
// numbered goose SQL migrations and are never edited once released, only
// followed by new ones.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// Postgres holds the PostgreSQL migrations under the directory "postgres".
// They create the tables (all named prescient_…), their indexes and the SQL
// functions prescient_schedule, prescient_cancel and prescient_resolve, in the
// first schema of the connection's search_path.
//
//go:embed postgres/*.sql
var Postgres embed.FS

// Latest returns the version of the last migration in dir of fsys (the
// number its file name starts with, as goose reads it): the schema version
// this binary brings a database to.
func Latest(fsys fs.FS, dir string) (int64, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		if !ok || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", e.Name(), err)
		}
		latest = max(latest, v)
	}
	return latest, nil
}
