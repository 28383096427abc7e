package ctlauth

import (
	"fmt"
	"time"
)

// ReplayOptions configures a ReplayGuard. Zero fields select the defaults.
type ReplayOptions struct {
	// MaxSkew is how far a message's time may be from the receiver's clock, either way
	// (default 30s). It bounds both clock disagreement plus delivery delay and how long a
	// receiver must remember a sender.
	MaxSkew time.Duration
	// Window is how many sequence numbers behind a sender's highest one are still accepted
	// once each, for messages reordered in transit (default 1024, at most 65536).
	Window int
	// MaxSenders bounds the senders remembered at once (default 65536). Senders silent for
	// longer than MaxSkew are forgotten when room is needed: their old messages are stale.
	MaxSenders int
	// NotBefore refuses messages sent before it. A receiver that restarts sets it to its
	// start time, so that what it forgot cannot be replayed to it.
	NotBefore time.Time
}

// Defaults of ReplayOptions.
const (
	DefaultMaxSkew    = 30 * time.Second
	DefaultWindow     = 1024
	DefaultMaxSenders = 65536
	maxWindow         = 65536
)

func (o ReplayOptions) withDefaults() (ReplayOptions, error) {
	if o.MaxSkew == 0 {
		o.MaxSkew = DefaultMaxSkew
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.MaxSenders == 0 {
		o.MaxSenders = DefaultMaxSenders
	}
	switch {
	case o.MaxSkew < 0:
		return o, fmt.Errorf("ctlauth: replay guard: negative skew %v", o.MaxSkew)
	case o.Window < 1 || o.Window > maxWindow:
		return o, fmt.Errorf("ctlauth: replay guard: window %d, want 1 to %d", o.Window, maxWindow)
	case o.MaxSenders < 1:
		return o, fmt.Errorf("ctlauth: replay guard: %d senders", o.MaxSenders)
	}
	// Whole words: the bitmap is indexed by seq modulo its size.
	o.Window = (o.Window + 63) &^ 63
	return o, nil
}

// ReplayGuard refuses messages whose (sender, sequence number) it has accepted before, and
// messages outside the time skew. Per sender it keeps the highest number accepted and a
// bitmap of the Window numbers below it (the sliding window of IPsec and DTLS). Call Accept
// only for authenticated messages, or anyone could fill it. Not safe for concurrent use.
type ReplayGuard struct {
	opts    ReplayOptions
	senders map[string]*seqWindow
}

type seqWindow struct {
	highest uint64
	bits    []uint64  // bit seq%size is set if seq in (highest-size, highest] was accepted
	last    time.Time // newest message time accepted from this sender
}

// NewReplayGuard returns a guard with validated options.
func NewReplayGuard(opts ReplayOptions) (*ReplayGuard, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &ReplayGuard{opts: o, senders: make(map[string]*seqWindow)}, nil
}

// Options returns the guard's options with defaults applied.
func (g *ReplayGuard) Options() ReplayOptions { return g.opts }

// Accept records message seq of sender sent at sent, as received at now. It returns an
// error wrapping ErrStale, ErrReplay or ErrTooManySenders if the message must be dropped.
func (g *ReplayGuard) Accept(sender string, seq uint64, sent, now time.Time) error {
	if seq == 0 {
		return fmt.Errorf("%w: sequence number 0", ErrMalformed)
	}
	skew := g.opts.MaxSkew
	if sent.Before(now.Add(-skew)) || sent.After(now.Add(skew)) {
		return fmt.Errorf("%w: from %s, sent %v, %v from now (at most %v)", ErrStale, sender, sent.UTC(), sent.Sub(now), skew)
	}
	if sent.Before(g.opts.NotBefore) {
		return fmt.Errorf("%w: from %s, sent %v, before this receiver started", ErrStale, sender, sent.UTC())
	}
	w := g.senders[sender]
	if w == nil {
		if len(g.senders) >= g.opts.MaxSenders && !g.forgetIdle(now) {
			return fmt.Errorf("%w: %d", ErrTooManySenders, len(g.senders))
		}
		w = &seqWindow{bits: make([]uint64, g.opts.Window/64)}
		g.senders[sender] = w
	}
	if !w.accept(seq) {
		return fmt.Errorf("%w: message %d from %s (highest seen %d)", ErrReplay, seq, sender, w.highest)
	}
	if sent.After(w.last) {
		w.last = sent
	}
	return nil
}

// forgetIdle drops the senders whose newest message is already stale; their older ones are
// too, so forgetting them reopens no replay. It reports whether any was dropped.
func (g *ReplayGuard) forgetIdle(now time.Time) bool {
	cut := now.Add(-g.opts.MaxSkew)
	n := len(g.senders)
	for s, w := range g.senders {
		if w.last.Before(cut) {
			delete(g.senders, s)
		}
	}
	return len(g.senders) < n
}

func (w *seqWindow) accept(seq uint64) bool {
	size := uint64(len(w.bits)) * 64
	switch {
	case seq > w.highest:
		if seq-w.highest >= size {
			clear(w.bits)
		} else {
			for s := w.highest + 1; s < seq; s++ {
				w.bits[(s%size)/64] &^= 1 << (s % 64)
			}
		}
		w.highest = seq
	case w.highest-seq >= size:
		return false // too old to tell: refuse
	case w.bits[(seq%size)/64]&(1<<(seq%64)) != 0:
		return false
	}
	w.bits[(seq%size)/64] |= 1 << (seq % 64)
	return true
}
