package cli

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient/migrations"
)

// modulePath is prescient's module: the main module of the stock binary, a
// dependency of a binary that builds its own command tree with
// NewRootCommand.
const modulePath = "github.com/prescient-dev/prescient"

// develVersion is the version Go records for a main module built from a
// source tree rather than fetched at a version (go build in a checkout
// without version control information, go run, a test binary).
const develVersion = "(devel)"

// versionInfo is what `prescient version` reports, from the build
// information Go embeds in every binary (runtime/debug.ReadBuildInfo).
type versionInfo struct {
	// Module and Version are the main module's: prescient's for the stock
	// binary, or that of the program that embeds prescient's CLI.
	Module  string `json:"module"`
	Version string `json:"version"`
	// Prescient is prescient's module version when it is not the main
	// module (the CLI built into another program).
	Prescient string `json:"prescient_version,omitempty"`
	// Revision, Time and Modified come from version control, when the
	// binary was built in a checkout with it (go build's -buildvcs, on by
	// default): the commit, its time, and whether the work tree had changes
	// that are not committed. Empty or false without that information.
	Revision string `json:"vcs_revision,omitempty"`
	Time     string `json:"vcs_time,omitempty"`
	Modified bool   `json:"vcs_modified"`
	// Go is the toolchain that built the binary, and the platform.
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// Schema is the schema version this binary migrates each store to.
	Schema *schemaVersions `json:"schema,omitempty"`
}

// schemaVersions are the last migration of each store this binary has.
type schemaVersions struct {
	Postgres int64 `json:"postgres"`
	SQLite   int64 `json:"sqlite"`
}

// readSchema returns the schema versions this binary's migrations reach,
// nil if they cannot be read (they are embedded, so never in practice).
func readSchema() *schemaVersions {
	pg, err := migrations.Latest(migrations.Postgres, "postgres")
	if err != nil {
		return nil
	}
	lite, err := migrations.Latest(migrations.SQLite, "sqlite")
	if err != nil {
		return nil
	}
	return &schemaVersions{Postgres: pg, SQLite: lite}
}

// readVersion turns build information into a versionInfo. ok false (a
// binary built without module support) leaves the module unknown.
func readVersion(bi *debug.BuildInfo, ok bool) versionInfo {
	v := versionInfo{Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || bi == nil {
		v.Module, v.Version = modulePath, develVersion
		return v
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	v.Module, v.Version = bi.Main.Path, bi.Main.Version
	if v.Module == "" {
		v.Module = modulePath
	}
	if v.Version == "" {
		v.Version = develVersion
	}
	if v.Module != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				v.Prescient = d.Version
				if d.Replace != nil {
					v.Prescient += " => " + d.Replace.Path
					if d.Replace.Version != "" {
						v.Prescient += " " + d.Replace.Version
					}
				}
			}
		}
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// short is the one line --version prints: "v1.2.0", or "(devel) revision
// 1a2b3c4d5e6f, 2026-11-23T10:00:00Z, modified".
func (v versionInfo) short() string {
	var parts []string
	// A pseudo-version (v0.0.0-20261123162353-4cfae3f870c3) names the
	// revision already.
	if v.Revision != "" && !strings.Contains(v.Version, shortRevision(v.Revision)) {
		parts = append(parts, "revision "+shortRevision(v.Revision))
	}
	if v.Time != "" {
		parts = append(parts, v.Time)
	}
	if v.Modified {
		parts = append(parts, "modified")
	}
	if len(parts) == 0 {
		return v.Version
	}
	return v.Version + " (" + strings.Join(parts, ", ") + ")"
}

// shortRevision shortens a commit hash to 12 characters, as Go's pseudo-
// versions do.
func shortRevision(r string) string {
	if len(r) > 12 {
		return r[:12]
	}
	return r
}

// write prints v for people, saying what a missing piece means.
func (v versionInfo) write(out io.Writer) {
	version := v.Version
	if version == develVersion {
		version += " (built from a source tree, not from a released module version)"
	}
	fmt.Fprintf(out, "prescient %s\n", v.short())
	fmt.Fprintf(out, "  module    %s\n", v.Module)
	fmt.Fprintf(out, "  version   %s\n", version)
	if v.Prescient != "" {
		fmt.Fprintf(out, "  prescient %s\n", v.Prescient)
	}
	switch {
	case v.Revision == "":
		fmt.Fprintln(out, "  revision  unknown (built without version control information: go run, a test binary, -buildvcs=false, or outside a checkout)")
	case v.Modified:
		fmt.Fprintf(out, "  revision  %s, modified (the work tree had changes that were not committed)\n", v.Revision)
	default:
		fmt.Fprintf(out, "  revision  %s\n", v.Revision)
	}
	if v.Time != "" {
		fmt.Fprintf(out, "  time      %s (of the commit)\n", v.Time)
	}
	fmt.Fprintf(out, "  go        %s %s\n", v.Go, v.Platform)
	if v.Schema != nil {
		fmt.Fprintf(out, "  schema    PostgreSQL %d, SQLite %d (the version prescient migrate brings a database to)\n", v.Schema.Postgres, v.Schema.SQLite)
	}
}

// versionOpts are the flags of `prescient version`.
type versionOpts struct {
	json bool
}

// Validate accepts every versionOpts.
func (o *versionOpts) Validate() error { return nil }

func (e *env) versionCommand() *cobra.Command {
	o := &versionOpts{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit it was built from, the Go toolchain and the schema version",
		Long: `version prints the module version of this binary, and, when it was built in a
version-controlled checkout, the commit (revision), its time, and whether the
work tree had uncommitted changes (modified), as Go records them in the
binary. A binary built from a source tree rather than a released version says
"(devel)". It names the schema version prescient migrate brings each store
to. It needs no configuration or database. --json prints the same as
one JSON document; prescient --version prints the first line alone.`,
		Example: `  prescient version
  prescient --version
  prescient version --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			v := readVersion(debug.ReadBuildInfo())
			v.Schema = readSchema()
			if o.json {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			v.write(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print JSON for scripts")
	return cmd
}

// setVersion gives the root command its --version flag.
func setVersion(root *cobra.Command) {
	root.Version = readVersion(debug.ReadBuildInfo()).short()
	root.SetVersionTemplate("prescient {{.Version}}\n")
}
