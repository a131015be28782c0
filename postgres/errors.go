package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/prescient-dev/prescient/driver"
)

// interpretError translates an error from pgx into the domain's terms at the
// store's boundary: no rows is driver.ErrNotFound, and a server error keeps
// its message, detail, hint and SQLSTATE but not its pgconn type. Other errors
// (a cancelled context, a lost connection) pass through unchanged, so that
// errors.Is still finds context.Canceled and its kin. So does a statement
// the server cancelled because ctx, the operation's context, ended: the pool
// asks the server to cancel it (pgconn.CancelRequestContextWatcherHandler),
// and the server's answer, SQLSTATE 57014, would otherwise read as the
// database's failure rather than the caller's cancellation (a server
// stopping would count its own shutdown as store errors).
func interpretError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// undefined_table / undefined_function on one of ours: not migrated.
		if (pgErr.Code == "42P01" || pgErr.Code == "42883") && strings.Contains(pgErr.Message, "prescient_") {
			return fmt.Errorf("%w (postgres: %s)", driver.ErrNotMigrated, pgErr.Message)
		}
		msg := pgErr.Message
		if pgErr.Detail != "" {
			msg += ": " + pgErr.Detail
		}
		if pgErr.Hint != "" {
			msg += " (hint: " + pgErr.Hint + ")"
		}
		if pgErr.Code == "57014" && ctx.Err() != nil {
			return fmt.Errorf("postgres: %s (SQLSTATE %s): %w", msg, pgErr.Code, context.Cause(ctx))
		}
		return &ServerError{Code: pgErr.Code, text: fmt.Sprintf("postgres: %s (SQLSTATE %s)", msg, pgErr.Code)}
	}
	return err
}

// ServerError is an error PostgreSQL answered with, in the store's terms:
// it reads as the server's message, detail and hint with the SQLSTATE, and
// keeps the SQLSTATE for callers that act on it (errors.As).
type ServerError struct {
	// Code is the SQLSTATE, such as "42501" (insufficient privilege).
	Code string
	text string
}

func (e *ServerError) Error() string { return e.text }
