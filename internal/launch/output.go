package launch

import (
	"fmt"
	"io"
	"sync"
)

// lineWriter writes whole lines to one output stream. Every line is a single Write under the
// stream's mutex, so lines of different ranks (and mpirun's own messages) never interleave.
type lineWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func newLineWriter(w io.Writer) *lineWriter { return &lineWriter{w: w} }

// writeLine writes prefix, line and a newline. Write errors are dropped: a closed terminal
// must not stop the job or block the ranks writing to us.
func (lw *lineWriter) writeLine(prefix string, line []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	lw.buf = append(lw.buf[:0], prefix...)
	lw.buf = append(lw.buf, line...)
	lw.buf = append(lw.buf, '\n')
	_, _ = lw.w.Write(lw.buf)
	if cap(lw.buf) > 1<<20 {
		lw.buf = nil // don't pin the memory of one huge line
	}
}

// logf writes one "mpirun: " message.
func (lw *lineWriter) logf(format string, args ...any) {
	lw.writeLine("mpirun: ", fmt.Appendf(nil, format, args...))
}
