package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// TestReadVersion: what version reports for a released binary, one built
// in a checkout (clean or modified), one without version control
// information, and prescient's CLI built into another program.
func TestReadVersion(t *testing.T) {
	t.Parallel()
	vcs := func(rev, at, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev}, {Key: "vcs.time", Value: at}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "4cfae3f870c38de71be90e46aa8080fa7e133776"
	for _, tc := range []struct {
		name  string
		bi    *debug.BuildInfo
		ok    bool
		short string
		lines []string
	}{
		{"released", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "v1.4.0"}},
			true, "v1.4.0", []string{
				"prescient v1.4.0\n", "  version   v1.4.0\n",
				"  revision  unknown (built without version control information",
				"  go        go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"}},
		{"checkout, modified", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "v0.0.0-20261123162353-4cfae3f870c3+dirty"},
			Settings: vcs(rev, "2026-11-23T16:23:53Z", "true")},
			true, "v0.0.0-20261123162353-4cfae3f870c3+dirty (2026-11-23T16:23:53Z, modified)", []string{
				"  revision  " + rev + ", modified (the work tree had changes that were not committed)\n",
				"  time      2026-11-23T16:23:53Z (of the commit)\n"}},
		{"devel with VCS", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}, Settings: vcs(rev, "2026-11-23T16:23:53Z", "false")},
			true, "(devel) (revision 4cfae3f870c3, 2026-11-23T16:23:53Z)", []string{
				"  version   (devel) (built from a source tree, not from a released module version)\n",
				"  revision  " + rev + "\n"}},
		{"devel without VCS", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}},
			true, "(devel)", []string{"prescient (devel)\n", "  revision  unknown"}},
		{"no build information", nil, false, "(devel)", []string{"  module    " + modulePath + "\n", "  revision  unknown"}},
		{"inside another program", &debug.BuildInfo{Main: debug.Module{Path: "example.com/shop", Version: "v2.0.1"},
			Deps: []*debug.Module{{Path: "github.com/spf13/cobra", Version: "v1.10.2"}, {Path: modulePath, Version: "v1.4.0"}}},
			true, "v2.0.1", []string{"  module    example.com/shop\n", "  prescient v1.4.0\n"}},
	} {
		v := readVersion(tc.bi, tc.ok)
		if got := v.short(); got != tc.short {
			t.Errorf("%s: short %q, want %q", tc.name, got, tc.short)
		}
		var b bytes.Buffer
		v.write(&b)
		wantContains(t, tc.name, b.String(), tc.lines...)
	}
}

// TestVersionCommand: version and --version print this binary's build
// information, as text and as JSON.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	v := readVersion(debug.ReadBuildInfo())
	if got, want := h.mustRun("--version"), "prescient "+v.short()+"\n"; got != want {
		t.Errorf("--version = %q, want %q", got, want)
	}
	wantContains(t, "version", h.mustRun("version"), "prescient "+v.short()+"\n", "  module    ", "  go        "+runtime.Version())
	var got versionInfo
	oneJSON(t, "version --json", h.mustRun("version", "--json"), &got)
	schema := got.Schema
	got.Schema = nil
	if got != v {
		t.Errorf("version --json = %+v, want %+v", got, v)
	}
	// The schema versions are those of the last migration files.
	last := func(dir string) int64 {
		entries, err := os.ReadDir(filepath.Join("..", "migrations", dir))
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, e := range entries {
			if num, _, ok := strings.Cut(e.Name(), "_"); ok && strings.HasSuffix(e.Name(), ".sql") {
				if v, err := strconv.ParseInt(num, 10, 64); err == nil {
					n = max(n, v)
				}
			}
		}
		return n
	}
	want := schemaVersions{Postgres: last("postgres"), SQLite: last("sqlite")}
	if schema == nil || *schema != want || want.Postgres == 0 {
		t.Errorf("version --json schema = %+v, want %+v", schema, want)
	}
	wantContains(t, "version", h.mustRun("version"), fmt.Sprintf("  schema    PostgreSQL %d, SQLite %d", want.Postgres, want.SQLite))
}

// TestVersionOfABuiltBinary builds the stock binary in this checkout with
// version control information, as go build does by default, and checks
// that version reports the commit checked out.
func TestVersionOfABuiltBinary(t *testing.T) {
	t.Parallel()
	git := func(args ...string) string {
		out, err := exec.Command("git", args...).Output()
		if err != nil {
			t.Fatalf("git %s: %v (this test needs the git checkout of the module)", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	headBefore := git("rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "prescient")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/prescient")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	headAfter := git("rev-parse", "HEAD")
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("prescient version --json: %v", err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("prescient version --json: %v\n%s", err, out)
	}
	if v.Module != modulePath || (v.Revision != headBefore && v.Revision != headAfter) || v.Time == "" || v.Version == "" {
		t.Fatalf("version of a binary built at %s: %+v", headBefore, v)
	}
	// Go's pseudo-version names the commit, unless a tag does; "+dirty"
	// goes with modified.
	if git("tag", "--points-at", v.Revision) == "" && !strings.Contains(v.Version, v.Revision[:12]) {
		t.Errorf("version %q does not name revision %s", v.Version, v.Revision)
	}
	if strings.HasSuffix(v.Version, "+dirty") != v.Modified {
		t.Errorf("version %q but modified %v", v.Version, v.Modified)
	}
	text, err := exec.Command(bin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(text), "prescient "+v.Version) {
		t.Errorf("prescient --version = %q, %v; want it to start with prescient %s", text, err, v.Version)
	}
}
