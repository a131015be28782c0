// Package hatest proves prescient's promise across PostgreSQL's own
// failover. It builds a pg_auto_failover formation of its own (a monitor, a
// primary and a synchronous secondary, on loopback ports in a temporary
// directory), runs real prescient server processes (the faultserver of
// internal/faulttest) against it through a multi-host URL, and kills the
// primary node, or switches over, in the middle of a slot. At the end every
// job must have been checked exactly once, every slot that was due during
// the failover caught up, and no server restarted.
//
// It also runs prescient behind a real PgBouncer in transaction pooling
// mode, and shows what asynchronous replication loses.
//
// The tests install the Debian packages they need (postgresql-15-auto-failover,
// pgbouncer) with apt-get when they are missing, and skip, naming the
// package, only when the package manager refuses.
package hatest
