package delivery_test

import (
	"bytes"
	"context"
	"encoding/json"
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

// A log sink writes the payload as the JSON it is: an object in a JSON log
// (it was a string holding JSON, which a log pipeline cannot query; found
// by an SRE's trial), the quoted text in a text log.
func TestLogSinkPayloadIsJSON(t *testing.T) {
	d := &delivery.Delivery{Sink: "ops", Attempts: 1, Event: &driver.Event{ID: 7, IdempotencyKey: "order/1001/c/alert",
		Event: "order.unshipped", Stage: "alert", Entity: "order", Key: "1001", Check: "c", Payload: []byte(`{"amount":42}`)}}
	var js, text bytes.Buffer
	for _, l := range []*slog.Logger{slog.New(slog.NewJSONHandler(&js, nil)), slog.New(slog.NewTextHandler(&text, nil))} {
		if _, err := (&delivery.Log{Logger: l}).Deliver(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	var rec struct{ Payload map[string]int }
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil || rec.Payload["amount"] != 42 {
		t.Errorf("JSON log line %s: payload %v (%v), want the object {\"amount\":42}", js.String(), rec.Payload, err)
	}
	if !strings.Contains(text.String(), `payload="{\"amount\":42}"`) {
		t.Errorf("text log line %s: want payload=\"{\\\"amount\\\":42}\"", text.String())
	}
}
