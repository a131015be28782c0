// Command prescient is the stock prescient binary: a server (`prescient run`)
// and the operator's tools (migrate, schedule, cancel, resolve, sweep, status,
// history, slots, demo). Its only Go check is the order example, so that
// `prescient demo` runs out of the box; build a binary with your own checks
// from package cli.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/cli"
	"github.com/prescient-dev/prescient/example/orders"

	// The time zone database, for hosts without one (a FROM scratch or
	// distroless image): a declared check's timestamp anchor is read in the
	// database session's TimeZone, such as Europe/Paris. About 450 kB.
	_ "time/tzdata"
)

func main() {
	reg := &checks.Registry{}
	if err := orders.Register(reg, orders.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, "prescient:", err)
		os.Exit(1)
	}
	root := cli.NewRootCommand(&cli.Opts{Checks: reg, Out: os.Stdout, Err: os.Stderr})
	if err := root.ExecuteContext(context.Background()); err != nil {
		os.Exit(1)
	}
}
