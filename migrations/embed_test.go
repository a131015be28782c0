package migrations

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// createFunctionRE finds the statements whose body holds semicolons, which
// goose must be told where they end: functions and anonymous DO blocks.
var createFunctionRE = regexp.MustCompile(`CREATE (OR REPLACE )?FUNCTION|(?m)^DO \$\$`)

// TestPostgresFiles checks what goose relies on and cannot check until it
// runs: numbered files without gaps, each with an Up and a Down section, and
// every function body fenced so goose does not split it at its semicolons.
func TestPostgresFiles(t *testing.T) {
	names, err := fs.Glob(Postgres, "postgres/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no migrations embedded under postgres/")
	}
	nameRE := regexp.MustCompile(`^postgres/(\d{5})_[a-z0-9_]+\.sql$`)
	for i, name := range names {
		m := nameRE.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("%s: want postgres/NNNNN_snake_case.sql", name)
			continue
		}
		if want := fmt.Sprintf("%05d", i+1); m[1] != want {
			t.Errorf("%s: version %s, want %s (versions run 1, 2, … without gaps)", name, m[1], want)
		}
		b, err := fs.ReadFile(Postgres, name)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		up, down := strings.Index(text, "-- +goose Up"), strings.Index(text, "-- +goose Down")
		if up < 0 || down < up {
			t.Errorf("%s: want a -- +goose Up section followed by a -- +goose Down section", name)
		}
		begins := strings.Count(text, "-- +goose StatementBegin")
		if ends := strings.Count(text, "-- +goose StatementEnd"); begins != ends {
			t.Errorf("%s: %d StatementBegin, %d StatementEnd", name, begins, ends)
		}
		if fns := len(createFunctionRE.FindAllString(text, -1)); fns != begins {
			t.Errorf("%s: %d functions and DO blocks but %d fenced statements", name, fns, begins)
		}
	}
}
