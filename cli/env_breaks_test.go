package cli

import (
	"strings"
	"testing"
)

// TestEnvOnlyLineBreaks: a variable that holds nothing but a line
// break (a secret file that was mounted empty: "\n") was refused before
// dfde6f9 ("holds a line break"); TrimRight now makes it "", and
// database.url: ${DATABASE_URL} silently becomes no URL at all: the server
// runs on a local SQLite file prescient.db instead of failing.
func TestEnvOnlyLineBreaks(t *testing.T) {
	for _, v := range []string{"\n", "\r\n"} {
		path := writeConfig(t, "database:\n  url: ${DATABASE_URL}\nworkers: 2\n")
		cfg, err := loadConfig(path, envOf(map[string]string{"DATABASE_URL": v}))
		if err == nil {
			err = cfg.Validate()
		}
		if err == nil {
			t.Errorf("DATABASE_URL=%q: accepted, database.url %q, database.path %q; want an error (the variable holds only a line break)",
				v, cfg.Database.URL, cfg.Database.Path)
		}
	}
}

// TestEnvUnicodeLineBreak: YAML also breaks lines at U+0085,
// U+2028 and U+2029; expandEnv checks only \r and \n, so such a value is
// pasted in, cuts the line, and the error names line 3, YAML syntax, and not
// the variable on line 2.
func TestEnvUnicodeLineBreak(t *testing.T) {
	for _, v := range []string{"/var/lib/a\u2028b.db", "/var/lib/a\u0085b.db"} {
		path := writeConfig(t, "database:\n  path: ${P}\nworkers: 2\n")
		_, err := loadConfig(path, envOf(map[string]string{"P": v}))
		if err == nil || !strings.Contains(err.Error(), "${P}") || !strings.Contains(err.Error(), ":2:") {
			t.Errorf("P=%q: %v; want an error naming ${P} on line 2", v, err)
		}
	}
}
