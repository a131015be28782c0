package prescient

import (
	"context"
	"errors"
	"time"
)

// TypedClient is a Client whose …Tx methods take the store's own transaction
// type, so that the compiler checks the transaction an application passes:
// over a *postgres.Store it is a TypedClient[pgx.Tx], over a *sqlite.Store a
// TypedClient[*sql.Tx], and handing one the other's transaction does not
// compile. Everything else is the embedded Client's.
//
//	client, err := prescient.NewTypedClient(store, cfg) // *TypedClient[pgx.Tx]
//	err = pgx.BeginFunc(ctx, store.Pool(), func(tx pgx.Tx) error {
//		_, err := client.ScheduleTx(ctx, tx, params)
//		return err
//	})
type TypedClient[TTx any] struct {
	*Client
	store TypedStore[TTx]
}

// NewTypedClient returns a typed client over store; see NewClient for cfg.
// TTx is inferred from the store.
func NewTypedClient[TTx any](store TypedStore[TTx], cfg *Config) (*TypedClient[TTx], error) {
	c, err := NewClient(store, cfg)
	if err != nil {
		return nil, err
	}
	return &TypedClient[TTx]{Client: c, store: store}, nil
}

// ErrNilTx is returned by the …Tx methods (of a Client or a TypedClient)
// given a nil transaction: the call would otherwise run in a transaction of
// its own, apart from the application's.
var ErrNilTx = errors.New("prescient: nil transaction: use the method without Tx to run in a transaction of its own")

// unwrap returns tx as the store's methods take it, refusing a nil one.
func (c *TypedClient[TTx]) unwrap(tx TTx) (any, error) {
	v := c.store.UnwrapTx(tx)
	if v == nil {
		return nil, ErrNilTx
	}
	return v, nil
}

// ScheduleTx is Schedule inside the application's transaction tx, so that the
// event and its check commit together.
func (c *TypedClient[TTx]) ScheduleTx(ctx context.Context, tx TTx, p ScheduleParams) (*Job, error) {
	v, err := c.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return c.Client.ScheduleTx(ctx, v, p)
}

// ScheduleManyTx is ScheduleMany inside the application's transaction tx.
func (c *TypedClient[TTx]) ScheduleManyTx(ctx context.Context, tx TTx, ps []ScheduleParams) ([]*Job, error) {
	v, err := c.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return c.Client.ScheduleManyTx(ctx, v, ps)
}

// RescheduleTx is Reschedule inside the application's transaction tx.
func (c *TypedClient[TTx]) RescheduleTx(ctx context.Context, tx TTx, entity, key, check string, at time.Time) (*Job, error) {
	v, err := c.unwrap(tx)
	if err != nil {
		return nil, err
	}
	return c.Client.RescheduleTx(ctx, v, entity, key, check, at)
}

// CancelTx is Cancel inside the application's transaction tx.
func (c *TypedClient[TTx]) CancelTx(ctx context.Context, tx TTx, entity, key, check string) (int, error) {
	v, err := c.unwrap(tx)
	if err != nil {
		return 0, err
	}
	return c.Client.CancelTx(ctx, v, entity, key, check)
}

// ResolveTx is Resolve inside the application's transaction tx.
func (c *TypedClient[TTx]) ResolveTx(ctx context.Context, tx TTx, entity, key, event string) (int, error) {
	v, err := c.unwrap(tx)
	if err != nil {
		return 0, err
	}
	return c.Client.ResolveTx(ctx, v, entity, key, event)
}
