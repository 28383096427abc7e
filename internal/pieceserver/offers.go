package pieceserver

import (
	"errors"
	"fmt"
	"strings"
)

// Defaults of Config's offer caps. An open offer holds a listening socket and an open file
// for up to job.PieceOfferTTL; a restarting rank takes its pieces one after another.
const (
	DefaultMaxOffers             = 128
	DefaultMaxOffersPerRequester = 16
)

// ErrTooManyOffers reports that a piece request was refused because the node already holds
// as many offers open as it allows, for the requester or in total.
var ErrTooManyOffers = errors.New("too many piece offers open")

// offers counts the open offers of a server, per requester and in total, and refuses new
// ones beyond the caps, so that nobody can exhaust the node's file descriptors (which would
// stop it from spawning ranks). It only decides and is not safe for concurrent use.
type offers struct {
	maxTotal, maxPer int
	total            int
	by               map[string]int
}

func newOffers(maxTotal, maxPer int) *offers {
	return &offers{maxTotal: maxTotal, maxPer: maxPer, by: map[string]int{}}
}

// take counts a new offer for requester, or says why not (wrapping ErrTooManyOffers).
func (o *offers) take(requester string) error {
	switch {
	case o.by[requester] >= o.maxPer:
		return fmt.Errorf("%w: %d for this requester, at most %d; try again when they are taken or expire",
			ErrTooManyOffers, o.by[requester], o.maxPer)
	case o.total >= o.maxTotal:
		return fmt.Errorf("%w: %d on this node, at most %d; try again when they are taken or expire",
			ErrTooManyOffers, o.total, o.maxTotal)
	}
	o.by[requester]++
	o.total++
	return nil
}

// release uncounts an offer of requester that was taken, expired or withdrawn.
func (o *offers) release(requester string) {
	if o.by[requester] <= 0 {
		return
	}
	if o.by[requester]--; o.by[requester] == 0 {
		delete(o.by, requester)
	}
	o.total--
}

// requesterOf names who sent a request by its reply subject: a NATS connection receives
// the replies to all its requests under one inbox prefix ("_INBOX.<id>.<token>"), so the
// subject without its last token names the connection. A reply subject of one or two
// tokens names itself.
func requesterOf(reply string) string {
	if i := strings.LastIndexByte(reply, '.'); i > 0 && strings.Count(reply, ".") >= 2 {
		return reply[:i]
	}
	return reply
}
