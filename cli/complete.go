package cli

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/prescient-dev/prescient/driver"
	"github.com/prescient-dev/prescient/history"
	"github.com/prescient-dev/prescient/postgres"
	"github.com/prescient-dev/prescient/sqlite"
)

// Shell completion (`prescient completion bash|zsh|fish`, which cobra
// provides) completes check names, event names, outcomes and entity names.
// The names come from this binary's registry and, where the configuration
// names a database that answers quickly, from the database: the check
// catalog every server records, and the entities of pending jobs. A database
// that is missing, slow or unreadable only makes the completions fewer:
// completion never fails, prints nothing of its own and creates no file.

// completeTimeout bounds the database work of one completion: a shell waits
// for it at every Tab.
const completeTimeout = 2 * time.Second

// completeEntitiesMax bounds the entity names one completion reads.
const completeEntitiesMax = 1000

// completeEntitiesPage is how many entity names one JobEntities call reads.
const completeEntitiesPage = 200

// argKind says what a positional argument holds, for completion.
type argKind int

const (
	argNone argKind = iota // nothing to suggest (a key)
	argEntity
	argCheck
	argEvent
)

// completeArgs completes a command's positional arguments, one kind per
// position; past the last, nothing.
func (e *env) completeArgs(cmd *cobra.Command, kinds ...argKind) {
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(kinds) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return e.complete(cmd.Context(), kinds[len(args)], toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeFlag completes a flag's value with names of kind.
func (e *env) completeFlag(cmd *cobra.Command, flag string, kind argKind) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return e.complete(cmd.Context(), kind, toComplete), cobra.ShellCompDirectiveNoFileComp
	})
}

// completeWords completes a flag's value from a fixed list of words, each
// with its description.
func completeWords(cmd *cobra.Command, flag string, words ...cobra.Completion) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}

// outcomeHelp describes each outcome for completion, as the README does.
var outcomeHelp = map[history.Outcome]string{
	history.Done:           "the check returned no next time",
	history.Resolved:       "the event it awaited happened",
	history.Cancelled:      "the application cancelled it",
	history.GuardMaxChecks: "it asked to run again after using all its checks",
	history.GuardHorizon:   "it asked for a time beyond the horizon",
	history.GuardPast:      "it asked for a time not after its slot",
	history.Failed:         "it failed retry.max_failures times in a row",
}

// completeOutcomes completes a --outcome value: one outcome, or the last of a
// comma-separated list, leaving out those already given.
func completeOutcomes(cmd *cobra.Command, flag string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		head, last := "", toComplete
		if i := strings.LastIndex(toComplete, ","); i >= 0 {
			head, last = toComplete[:i+1], toComplete[i+1:]
		}
		given := strings.Split(head, ",")
		var out []cobra.Completion
		for _, o := range history.Outcomes {
			if strings.HasPrefix(string(o), last) && !slices.Contains(given, string(o)) {
				out = append(out, cobra.CompletionWithDesc(head+string(o), outcomeHelp[o]))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

// complete returns the names of kind that start with prefix, sorted.
func (e *env) complete(ctx context.Context, kind argKind, prefix string) []cobra.Completion {
	if kind == argNone {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	seen := map[string]bool{}
	var names []string
	add := func(n string) {
		if strings.HasPrefix(n, prefix) && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	switch kind {
	case argCheck:
		for _, c := range e.opts.Checks.All() {
			add(c.Name)
		}
	case argEvent:
		for _, c := range e.opts.Checks.All() {
			for _, ev := range c.Opts.Awaits {
				add(ev)
			}
		}
	}
	drv, closeDrv := e.completionDriver(ctx)
	if drv != nil {
		defer closeDrv()
		switch kind {
		case argCheck, argEvent:
			entries, err := drv.CatalogList(ctx)
			cobra.CompDebugln("prescient: check catalog: "+errText(err), false)
			for _, en := range entries {
				if kind == argCheck {
					add(en.Check)
					continue
				}
				for _, ev := range en.Awaits {
					add(ev)
				}
			}
		case argEntity:
			after := ""
			for read := 0; read < completeEntitiesMax; read += completeEntitiesPage {
				page, err := drv.JobEntities(ctx, after, completeEntitiesPage)
				if err != nil {
					cobra.CompDebugln("prescient: entities: "+err.Error(), false)
					break
				}
				for _, n := range page {
					add(n)
				}
				if len(page) < completeEntitiesPage {
					break
				}
				after = page[len(page)-1]
			}
		}
	}
	slices.Sort(names)
	return names
}

// completionDriver opens the database the configuration names, for
// completion: without migrating it, and not at all when it is an SQLite
// file that does not exist (opening it would create it). It returns nil when
// there is no database to read.
func (e *env) completionDriver(ctx context.Context) (driver.Driver, func()) {
	cfg, err := e.config()
	if err != nil {
		cobra.CompDebugln("prescient: configuration: "+err.Error(), false)
		return nil, nil
	}
	if cfg.Database.URL == "" {
		if _, err := os.Stat(cfg.Database.Path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		st, err := sqlite.Open(ctx, cfg.Database.Path, &sqlite.Opts{BusyTimeout: cfg.busyTimeout()})
		if err != nil {
			cobra.CompDebugln("prescient: database.path: "+err.Error(), false)
			return nil, nil
		}
		return st.Driver(), st.Close
	}
	st, err := postgres.Open(ctx, cfg.Database.URL, &postgres.Opts{Schema: cfg.Database.Schema, MaxConns: 1})
	if err != nil {
		cobra.CompDebugln("prescient: database.url: "+err.Error(), false)
		return nil, nil
	}
	return st.Driver(), st.Close
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
