package checks

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prescient-dev/prescient/guards"
)

func TestRegistry(t *testing.T) {
	var r Registry
	fn := func(context.Context, *Job) (time.Time, error) { return time.Time{}, nil }
	if err := r.Register("order_unshipped", fn, &Opts{Awaits: []string{"shipped"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("order_unshipped", fn, nil); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second Register = %v, want ErrDuplicate", err)
	}
	bad := []struct {
		name string
		err  error
	}{
		{"", r.Register("", fn, nil)},
		{"space", r.Register("has space", fn, nil)},
		{"nil fn", r.Register("nilfn", nil, nil)},
		{"bad event", r.Register("x", fn, &Opts{Awaits: []string{"not ok"}})},
		{"bad guard", r.Register("y", fn, &Opts{Guards: guards.Limits{MaxChecks: -5}})},
		{"negative batch", r.RegisterBatch("z", func(context.Context, []*Job) ([]Result, error) { return nil, nil }, &Opts{BatchSize: -1})},
	}
	for _, b := range bad {
		if b.err == nil {
			t.Errorf("%s: Register = nil, want an error", b.name)
		}
	}
	c, ok := r.Lookup("order_unshipped")
	if !ok || c.Func == nil || c.Opts.Awaits[0] != "shipped" {
		t.Errorf("Lookup = %+v, %v", c, ok)
	}
	if _, ok := r.Lookup("nope"); ok {
		t.Error("Lookup(nope) found a check")
	}
	if n := len(r.All()); n != 1 {
		t.Errorf("All() has %d checks, want 1", n)
	}
}

func TestIdempotencyKey(t *testing.T) {
	j := &Job{Entity: "order", Key: "42", Check: "order_unshipped", CheckCount: 1}
	if got, want := j.IdempotencyKey(), "order/42/order_unshipped/2"; got != want {
		t.Errorf("IdempotencyKey = %q, want %q", got, want)
	}
}
