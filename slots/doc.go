// Package slots holds prescient's time grid: the resolution every check time is
// rounded up to, the ownership cycle that numbers slots into positions, and the
// static map of which server fires which position.
//
// Every function here is pure: it takes times and returns times, so it can be
// tested over fixed dates and used by any store.
package slots
