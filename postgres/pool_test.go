package postgres_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
	"github.com/prescient-dev/prescient/internal/pgtest"
	"github.com/prescient-dev/prescient/postgres"
)

// Open sizes the pool for the workers that will run groups on it, each
// holding a connection for its transaction, unless told its size: pgxpool's
// own default (4 connections on a 2-core machine) ran fewer groups at once
// than Workers says, and cost a per-entity slot a fifth of its speed.
func TestOpenSizesThePoolForTheWorkers(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	pgxDefault := int32(max(4, runtime.NumCPU()))
	cc, err := pgconn.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	// The same server as a keyword/value string.
	keywords := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cc.Host, cc.Port, cc.User, cc.Database)
	for _, tc := range []struct {
		name string
		url  string
		opts postgres.Opts
		want int32
	}{
		{"default workers", url, postgres.Opts{}, max(pgxDefault, prescient.WorkersDefault+postgres.PoolSpare)},
		{"workers", url, postgres.Opts{Workers: 40}, max(pgxDefault, 40+postgres.PoolSpare)},
		{"many workers", url, postgres.Opts{Workers: 200}, max(pgxDefault, postgres.PoolAutoMax)},
		{"max_conns wins", url, postgres.Opts{MaxConns: 3, Workers: 40}, 3},
		{"the url's pool_max_conns wins", pgtest.WithParam(url, "pool_max_conns=5"), postgres.Opts{Workers: 40}, 5},
		{"max_conns wins over the url", pgtest.WithParam(url, "pool_max_conns=5"), postgres.Opts{MaxConns: 7}, 7},
		{"keyword/value string", keywords, postgres.Opts{Workers: 40}, max(pgxDefault, 40+postgres.PoolSpare)},
		{"its pool_max_conns wins", keywords + " pool_max_conns=6", postgres.Opts{Workers: 40}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			opts.Schema = schema
			s, err := postgres.Open(t.Context(), tc.url, &opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.Pool().Config().MaxConns; got != tc.want {
				t.Errorf("pool MaxConns = %d, want %d", got, tc.want)
			}
			if got := s.Features().Conns; got != int(tc.want) {
				t.Errorf("Features().Conns = %d, want %d", got, tc.want)
			}
		})
	}
}
