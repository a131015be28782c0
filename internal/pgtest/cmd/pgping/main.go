// Command pgping exits 0 when the PostgreSQL server at the URL given as its
// argument accepts a connection and answers a query, and 1 otherwise. The
// test script uses it to decide whether it must start a server of its own.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: pgping URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, os.Args[1])
	if err == nil {
		_, err = conn.Exec(ctx, "SELECT 1")
		conn.Close(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgping:", err)
		os.Exit(1)
	}
}
