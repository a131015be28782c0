package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/prescient-dev/prescient"
)

// progressEvery is how often at most a progress line is redrawn: often
// enough to look alive, rarely enough to cost nothing next to the work.
const progressEvery = 100 * time.Millisecond

// progress is the line a long command (copy, sweep, migrate, bench) keeps
// rewriting on stderr while it works, when stderr is a terminal: "copy:
// 12000 job(s), 0 history record(s) copied (3s)". When stderr is not a
// terminal (a pipe, a file, a log collector) a progress is nil, and its
// methods do nothing: the output holds only what the command prints anyway.
// Its methods are safe for concurrent use (a sweep reports from the
// engine's goroutines).
type progress struct {
	mu    sync.Mutex
	out   io.Writer
	fd    int
	what  string
	now   func() time.Time
	start time.Time
	drawn time.Time // when the line was last drawn; zero before the first
	text  string    // what it says now, drawn or not
}

// terminalFd returns the file descriptor of w when w is a terminal.
func terminalFd(w io.Writer) (int, bool) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	return fd, term.IsTerminal(fd)
}

// newProgress returns the progress line of the command what on errOut, or
// nil when errOut is not a terminal.
func newProgress(errOut io.Writer, what string) *progress {
	fd, ok := terminalFd(errOut)
	if !ok {
		return nil
	}
	p := &progress{out: errOut, fd: fd, what: what, now: time.Now}
	p.start = p.now()
	return p
}

// set says what the command is doing now; the line is redrawn at most every
// progressEvery, and at once the first time.
func (p *progress) set(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.text = fmt.Sprintf(format, args...)
	if now := p.now(); p.drawn.IsZero() || now.Sub(p.drawn) >= progressEvery {
		p.draw(now)
	}
}

// done draws the final state, with the time the whole command took, and
// ends the line, so that what the command prints next starts on a line of
// its own.
func (p *progress) done(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.text = fmt.Sprintf(format, args...)
	p.draw(p.now())
	fmt.Fprint(p.out, "\n")
}

// clear erases the line, for a command that failed (its error follows) or
// that prints a line of its own (stdout may be the same terminal); the next
// set draws it again at once.
func (p *progress) clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eraseLocked()
}

func (p *progress) eraseLocked() {
	if !p.drawn.IsZero() {
		fmt.Fprint(p.out, "\r\x1b[K")
		p.drawn = time.Time{}
	}
}

// around returns w (the terminal the line is on, for the log records) so
// that each write first erases the line and then draws it again below what
// was written, instead of running on from its end. On a nil progress it
// returns w.
func (p *progress) around(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return progressAround{p: p, w: w}
}

type progressAround struct {
	p *progress
	w io.Writer
}

func (a progressAround) Write(b []byte) (int, error) {
	a.p.mu.Lock()
	defer a.p.mu.Unlock()
	drawn := !a.p.drawn.IsZero()
	a.p.eraseLocked()
	n, err := a.w.Write(b)
	if drawn {
		a.p.draw(a.p.now())
	}
	return n, err
}

// draw rewrites the line in place: carriage return, the text cut to the
// terminal's width (a line that wrapped could not be rewritten), and an
// erase to the end of the line for what a longer previous text left.
func (p *progress) draw(now time.Time) {
	p.drawn = now
	line := fmt.Sprintf("%s: %s (%s)", p.what, p.text, now.Sub(p.start).Round(time.Second))
	if w, _, err := term.GetSize(p.fd); err == nil && w > 1 {
		line, _ = cut(line, w-1)
	}
	fmt.Fprint(p.out, "\r"+line+"\x1b[K")
}

// sweepProgress counts a sweep's slots and checks as the engine reports
// them, on the progress line.
type sweepProgress struct {
	prescient.NopObserver
	p            *progress
	mu           sync.Mutex
	slots, jobs  int
	failed       int
	lastSlotText string
}

func (s *sweepProgress) CheckFinished(ev prescient.CheckEvent) {
	s.mu.Lock()
	s.jobs++
	if ev.Err != nil {
		s.failed++
	}
	text := s.textLocked()
	s.mu.Unlock()
	s.p.set("%s", text)
}

func (s *sweepProgress) SlotFired(ev prescient.SlotEvent) {
	s.mu.Lock()
	s.slots++
	s.lastSlotText = fmtSlot(ev.Slot)
	text := s.textLocked()
	s.mu.Unlock()
	s.p.set("%s", text)
}

func (s *sweepProgress) textLocked() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d overdue slot(s) fired, %d job(s) checked", s.slots, s.jobs)
	if s.failed > 0 {
		fmt.Fprintf(&b, " (%d failed)", s.failed)
	}
	if s.lastSlotText != "" {
		fmt.Fprintf(&b, ", last slot %s", s.lastSlotText)
	}
	return b.String()
}
