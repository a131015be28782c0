package delivery_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prescient-dev/prescient/delivery"
	"github.com/prescient-dev/prescient/driver"
)

// A log sink's whole job is to write the event to the server's log. When
// the server's log level is above info (log.level: warn, a common
// production setting), the logger drops an info line; the sink once
// reported success anyway, so the delivery was recorded as delivered with
// the event written nowhere.
func TestLogSinkAboveInfoDoesNotLoseTheEvent(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sink := &delivery.Log{Logger: logger}
	d := &delivery.Delivery{Sink: "ops", Attempts: 1, Event: &driver.Event{ID: 7, IdempotencyKey: "order/1001/c/order.unshipped",
		Event: "order.unshipped", Stage: "order.unshipped", Entity: "order", Key: "1001", Check: "c"}}
	if _, err := sink.Deliver(context.Background(), d); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	if !strings.Contains(buf.String(), "idempotency_key=order/1001/c/order.unshipped") || !strings.Contains(buf.String(), "level=INFO") {
		t.Fatalf("log sink over a logger at level warn: Deliver returned nil (the delivery is recorded delivered) "+
			"but wrote %q: the event is lost", buf.String())
	}
}
