package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Log writes one line per event to Logger (nil: slog.Default()), at Info,
// with the event's fields as attributes, whatever level the logger lets
// through: a server logging at warn must not record as delivered an event it
// wrote nowhere. It fails only if the logger's handler does.
type Log struct {
	Logger *slog.Logger
}

// Deliver logs d's event.
func (l *Log) Deliver(ctx context.Context, d *Delivery) (int, error) {
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	e := d.Event
	attrs := []any{"sink", d.Sink, "event_id", e.ID, "event", e.Event, "stage", e.Stage, "entity", e.Entity,
		"key", e.Key, "check", e.Check, "idempotency_key", e.IdempotencyKey, "created_at", e.CreatedAt}
	if e.Severity != "" {
		attrs = append(attrs, "severity", e.Severity)
	}
	if len(e.Payload) > 0 {
		// JSON: an object in a JSON log, the quoted text in a text log.
		attrs = append(attrs, "payload", e.Payload)
	}
	// Handle, not InfoContext: the logger's level decides what the server
	// says about itself, not whether an event reaches the sink.
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "event", 0)
	r.Add(attrs...)
	if err := log.Handler().Handle(ctx, r); err != nil {
		return 0, fmt.Errorf("log sink: %w", err)
	}
	return 0, nil
}

// Notifier sends a notification on a channel: *postgres.Store, with
// PostgreSQL's NOTIFY.
type Notifier interface {
	Notify(ctx context.Context, channel, payload string) error
}

// Notify is the postgres sink: the event is its row in prescient_outbox,
// and Notify sends its id on Channel (pg_notify), so that a consumer in any
// language that LISTENs on the channel reads the row by id. It works with
// the PostgreSQL store only, whose outbox its consumers read.
type Notify struct {
	Notifier Notifier
	Channel  string
}

// Deliver notifies the event's id.
func (n *Notify) Deliver(ctx context.Context, d *Delivery) (int, error) {
	return 0, n.Notifier.Notify(ctx, n.Channel, strconv.FormatInt(d.Event.ID, 10))
}
