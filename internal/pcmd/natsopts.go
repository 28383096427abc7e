package pcmd

import "github.com/mpios/mpios/internal/natsconn"

// NATSOptions says how to reach and authenticate to the NATS control plane (see package
// natsconn, which mpirun and the ranks share).
type NATSOptions = natsconn.Options
