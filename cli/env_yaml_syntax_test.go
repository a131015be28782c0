package cli

import (
	"strings"
	"testing"
)

// TestEnvValueHoldingYAMLSyntax: a variable's value is inserted in the file
// as it is, so a value holding YAML syntax changes what its line says. The
// error was YAML's alone ("mapping values are not allowed in this
// context"), naming neither the variable nor the fix; it now names the
// reference and says to quote it, without showing the value (found by a
// trial of bad input).
func TestEnvValueHoldingYAMLSyntax(t *testing.T) {
	for _, tc := range []struct{ config, value string }{
		{"database:\n  url: ${DATABASE_URL}\n", "host=db password=a: b"},
		{"database:\n  url: $DATABASE_URL\n", "[postgres://db"},
		{"log:\n  level: ${DATABASE_URL}\n", "{debug"},
		{"log:\n  level: ${DATABASE_URL}\n", "*x"},
	} {
		path := writeConfig(t, tc.config)
		_, err := loadConfig(path, envOf(map[string]string{"DATABASE_URL": tc.value}))
		if err == nil {
			t.Errorf("%q with %q: accepted; want an error", tc.config, tc.value)
			continue
		}
		msg := err.Error()
		ref := strings.TrimSpace(strings.SplitN(strings.Split(tc.config, "\n")[1], ":", 2)[1])
		if !strings.Contains(msg, ":2:") || !strings.Contains(msg, ref) || !strings.Contains(msg, "single quotes, '"+ref+"'") ||
			strings.Contains(msg, "debug") || strings.Contains(msg, "postgres://db") {
			t.Errorf("%q with %q: %v; want an error at line 2 naming %s and saying to quote it", tc.config, tc.value, msg, ref)
		}
	}
	// Quoted, the same values are read as they are.
	path := writeConfig(t, "database:\n  url: \"${DATABASE_URL}\"\n")
	cfg, err := loadConfig(path, envOf(map[string]string{"DATABASE_URL": "host=db password=a: b"}))
	if err != nil || cfg.Database.URL != "host=db password=a: b" {
		t.Errorf("quoted: %v, url %q; want the value as it is", err, cfg.Database.URL)
	}
}

// TestEnvValueCutByComment: a value holding " #" was cut there without a
// word, YAML reading the rest of the line as a comment: a password
// "s3cret #1" became "s3cret". It is an error naming the reference now.
func TestEnvValueCutByComment(t *testing.T) {
	for _, v := range []string{"postgres://u:s3cret #1@db/app", "postgres://u:s3cret\t#1@db/app"} {
		path := writeConfig(t, "database:\n  url: ${DATABASE_URL}\n")
		cfg, err := loadConfig(path, envOf(map[string]string{"DATABASE_URL": v}))
		if err == nil {
			t.Errorf("%q: accepted, database.url %q; want an error (the value was cut at its #)", v, cfg.Database.URL)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, ":2:") || !strings.Contains(msg, `'${DATABASE_URL}'`) || strings.Contains(msg, "s3cret") {
			t.Errorf("%q: %v; want an error at line 2 saying to quote ${DATABASE_URL}, not showing the value", v, msg)
		}
	}
	// Quoted, or with a # not after a space, nothing is cut.
	for _, tc := range []struct{ config, value string }{
		{"database:\n  url: \"${DATABASE_URL}\"\n", "postgres://u:s3cret #1@db/app"},
		{"database:\n  url: ${DATABASE_URL}\n", "postgres://u:s3cret#1@db/app"},
		{"database:\n  url: ${DATABASE_URL} # the primary\n", "postgres://u:s3cret@db/app"},
	} {
		path := writeConfig(t, tc.config)
		cfg, err := loadConfig(path, envOf(map[string]string{"DATABASE_URL": tc.value}))
		if err != nil || cfg.Database.URL != tc.value {
			t.Errorf("%q with %q: %v, url %q; want the value as it is", tc.config, tc.value, err, cfg.Database.URL)
		}
	}
}

// TestEnvValueReadAsItIs: a reference that is a whole value must be read as
// its variable's value: YAML took a leading # for a comment (url: "" and no
// error), a leading ! or & for a tag or an anchor, and between double
// quotes (the fix the hint gave) read backslash escapes; each is an error
// now, naming the reference and not the value. A reference in a comment,
// and values YAML reads as they are, are not (found by a review).
func TestEnvValueReadAsItIs(t *testing.T) {
	for _, tc := range []struct{ config, value string }{
		{"database:\n  url: ${P}\n", "#s3cret"},
		{"database:\n  url: ${P}\n", "!QAZ2wsx"},
		{"database:\n  url: ${P}\n", "&s3cret pw"},
		{"database:\n  url: ${P}\n", "!tag pw"},
		{"database:\n  url: \"${P}\"\n", `pa\tss`},
		{"database:\n  url: \"${P}\"\n", `pa\x41ss`},
		{"database:\n  url: ${P}   # the primary\n", "s3cret #1"},
		{"database:\n  url: postgres://u:${P}@db/app\n", "a #b"},
	} {
		path := writeConfig(t, tc.config)
		cfg, err := loadConfig(path, envOf(map[string]string{"P": tc.value}))
		if err == nil {
			t.Errorf("%q with %q: accepted, database.url %q; want an error", tc.config, tc.value, cfg.Database.URL)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, ":2:") || !strings.Contains(msg, "${P}") || !strings.Contains(msg, "single quotes") ||
			strings.Contains(msg, "s3cret") || strings.Contains(msg, "QAZ2wsx") || strings.Contains(msg, `pa\`) {
			t.Errorf("%q with %q: %v; want an error at line 2 naming ${P}, saying to use single quotes, not showing the value", tc.config, tc.value, msg)
		}
	}
	// An alias to no anchor is named after what follows the *: not shown.
	path := writeConfig(t, "database:\n  url: ${P}\n")
	if _, err := loadConfig(path, envOf(map[string]string{"P": "*QAZ2wsx"})); err == nil || strings.Contains(err.Error(), "QAZ2wsx") {
		t.Errorf("*QAZ2wsx: %v; want an error not showing it", err)
	}
	for _, tc := range []struct{ config, value, want string }{
		{"database:\n  url: '${P}'\n", `pa\tss #1 !x`, `pa\tss #1 !x`},
		{"database:\n  schema: app # for ${P}\n", "postgres://u:pw #1", ""},
		{"database:\n  url: postgres://db/app # user ${P}\n", "x #y", "postgres://db/app"},
		{"database:\n  url: ${P}\n", "", ""},
		{"database:\n  url: ${P} # the primary\n", "postgres://u:pw@db/app", "postgres://u:pw@db/app"},
		{"database:\n  url: >-\n    ${P}\n", "postgres://db/app", "postgres://db/app"},
		{"database:\n  url: \"postgres://db/app?\n    ${P}\"\n", "sslmode=disable", "postgres://db/app? sslmode=disable"},
	} {
		path := writeConfig(t, tc.config)
		cfg, err := loadConfig(path, envOf(map[string]string{"P": tc.value}))
		if err != nil || cfg.Database.URL != tc.want {
			t.Errorf("%q with %q: %v, url %q; want %q", tc.config, tc.value, err, cfg.Database.URL, tc.want)
		}
	}
}
