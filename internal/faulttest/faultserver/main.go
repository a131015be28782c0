// Command faultserver is the `prescient` command with one extra check,
// "fault", for the fault tests: a real server process, built the way a user
// builds theirs (cli.NewRootCommand with their own checks), that the tests
// kill, stop and cut off from its database.
//
// The check writes one row per check into the table fault_alerts through
// the engine's transaction, so an alert commits exactly when the job's new
// state does. A job whose payload says {"escalate": true} asks to be
// checked once more, two slots later; {"work_ms": N} makes each check take N
// milliseconds, so that kills land mid-slot; {"exit": true} makes the check
// kill its own process (exit status 3), as a fatal error in a check would.
//
// With FAULT_EMIT_SINKS set (sink names, comma-separated, configured in the
// tests' sinks section), a second check, "fault_emit", raises one event per
// job (job.Emit, stage "alert"), delivered to those sinks, and is done.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prescient-dev/prescient/checks"
	"github.com/prescient-dev/prescient/cli"
)

// The check writes fault_alerts (created by the tests) without a unique key:
// a job checked twice for the same due time shows as a duplicate row, which
// the tests count.

type payload struct {
	Escalate bool `json:"escalate"`
	WorkMS   int  `json:"work_ms"`
	Exit     bool `json:"exit"`
}

func check(server string) checks.Func {
	return func(ctx context.Context, j *checks.Job) (time.Time, error) {
		var p payload
		if len(j.Payload) > 0 {
			if err := json.Unmarshal(j.Payload, &p); err != nil {
				return time.Time{}, fmt.Errorf("payload: %w", err)
			}
		}
		if p.WorkMS > 0 {
			select {
			case <-time.After(time.Duration(p.WorkMS) * time.Millisecond):
			case <-ctx.Done():
				return time.Time{}, ctx.Err()
			}
		}
		if p.Exit {
			os.Exit(3)
		}
		if _, err := j.Tx.Exec(ctx, "INSERT INTO fault_alerts (entity_key, stage, slot, server) VALUES ($1, $2, $3, $4)",
			j.Key, j.CheckCount+1, j.Slot, server); err != nil {
			return time.Time{}, err
		}
		if p.Escalate && j.CheckCount == 0 {
			return j.Slot.Add(2 * time.Second), nil
		}
		return time.Time{}, nil
	}
}

// emit raises the job's alert event and is done.
func emit(ctx context.Context, j *checks.Job) (time.Time, error) {
	payload, err := json.Marshal(map[string]string{"key": j.Key})
	if err != nil {
		return time.Time{}, err
	}
	_, err = j.Emit(ctx, checks.Event{Name: "fault.alert", Stage: "alert", Severity: "warning", Payload: payload})
	return time.Time{}, err
}

func main() {
	reg := &checks.Registry{}
	if err := reg.Register("fault", check(os.Getenv("PRESCIENT_SERVER")), nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if sinks := os.Getenv("FAULT_EMIT_SINKS"); sinks != "" {
		if err := reg.Register("fault_emit", emit, &checks.Opts{Sinks: strings.Split(sinks, ",")}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	opts := &cli.Opts{Checks: reg}
	if skew := os.Getenv("FAULT_CLOCK_SKEW_MS"); skew != "" {
		ms, err := strconv.Atoi(skew)
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAULT_CLOCK_SKEW_MS:", err)
			os.Exit(2)
		}
		opts.Now = func() time.Time { return time.Now().Add(time.Duration(ms) * time.Millisecond) }
	}
	if err := cli.NewRootCommand(opts).ExecuteContext(context.Background()); err != nil {
		os.Exit(1)
	}
}
