package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient"
)

func TestInterpretError(t *testing.T) {
	if err := interpretError(nil); err != nil {
		t.Errorf("nil: %v", err)
	}
	if err := interpretError(fmt.Errorf("scan: %w", pgx.ErrNoRows)); !errors.Is(err, prescient.ErrNotFound) {
		t.Errorf("no rows: %v, want ErrNotFound", err)
	}
	pgErr := &pgconn.PgError{Code: "23505", Message: "duplicate key value", Detail: "Key (id)=(1) already exists.", Hint: "pick another"}
	err := interpretError(pgErr)
	var target *pgconn.PgError
	if errors.As(err, &target) {
		t.Errorf("server error still carries *pgconn.PgError: %#v", err)
	}
	want := "postgres: duplicate key value: Key (id)=(1) already exists. (hint: pick another) (SQLSTATE 23505)"
	if err == nil || err.Error() != want {
		t.Errorf("server error: %v, want %s", err, want)
	}
	if err := interpretError(context.Canceled); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled kept", err)
	}
}
