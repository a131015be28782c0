package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
)

func TestInterpretError(t *testing.T) {
	if err := interpretError(context.Background(), nil); err != nil {
		t.Errorf("nil: %v", err)
	}
	if err := interpretError(context.Background(), fmt.Errorf("scan: %w", pgx.ErrNoRows)); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("no rows: %v, want ErrNotFound", err)
	}
	pgErr := &pgconn.PgError{Code: "23505", Message: "duplicate key value", Detail: "Key (id)=(1) already exists.", Hint: "pick another"}
	err := interpretError(context.Background(), pgErr)
	var target *pgconn.PgError
	if errors.As(err, &target) {
		t.Errorf("server error still carries *pgconn.PgError: %#v", err)
	}
	want := "postgres: duplicate key value: Key (id)=(1) already exists. (hint: pick another) (SQLSTATE 23505)"
	if err == nil || err.Error() != want {
		t.Errorf("server error: %v, want %s", err, want)
	}
	if err := interpretError(context.Background(), context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled kept", err)
	}
	// The server cancelling a statement because its context ended is the
	// caller's cancellation; the same SQLSTATE with the context alive (an
	// administrator's pg_cancel_backend, statement_timeout) is the server's.
	cancelled := &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	ctx, cancel := context.WithCancel(context.Background())
	if err := interpretError(ctx, cancelled); errors.Is(err, context.Canceled) {
		t.Errorf("57014, context alive: %v, want a server error", err)
	}
	cancel()
	err = interpretError(ctx, cancelled)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "SQLSTATE 57014") {
		t.Errorf("57014, context cancelled: %v, want context.Canceled and the server's message", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 0)
	defer cancel()
	if err := interpretError(ctx, cancelled); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("57014, deadline passed: %v, want context.DeadlineExceeded", err)
	}
}
