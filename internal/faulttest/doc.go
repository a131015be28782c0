// Package faulttest proves prescient's promise under faults: real server
// processes (faultserver, built from cli.NewRootCommand with a check that
// writes its alert through the engine's transaction) run against one real
// PostgreSQL on a one-second slot grid while the tests kill them, stop them
// and restart the database. At the end every job must have its history
// outcome, every expected alert exactly one row, and nothing be left pending.
//
// The tests run in the short variant by default (CI); set
// PRESCIENT_FAULT_LONG=1 for the long one (more jobs, slots and faults).
package faulttest
