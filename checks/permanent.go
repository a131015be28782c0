package checks

import "errors"

// Permanent marks err, a check's error, as a failure no retry can mend (a
// key the check can never look up, a payload it can never read): the job
// ends failed at once, with err as its last error, instead of being retried
// until it has failed max_failures times in a row. Its writes are rolled
// back as for any failure. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked by
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

func (e *permanentError) Unwrap() error { return e.err }
