// Command natsd is the NATS server of one testbed site (testbed.Options.Sites): the
// embedded nats-server of this module, run as its own process so that the testbed can start
// it inside the site's network namespace (through nodeexec), where its routes to the other
// sites' servers cross the emulated links.
//
//	natsd -config FILE
//
// FILE is a nats-server configuration file (the testbed writes it, mode 0600: it holds the
// client and route credentials, which therefore never appear on a command line). natsd logs
// to standard error, stops on SIGTERM or SIGINT, and exits 1 if the server does not start.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	config := fs.String("config", "", "nats-server configuration `FILE`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *config == "" || fs.NArg() != 0 {
		return errors.New("usage: natsd -config FILE")
	}
	opts, err := server.ProcessConfigFile(*config)
	if err != nil {
		return err
	}
	opts.NoSigs = true // handled below, so that shutdown is orderly and logged
	srv, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	srv.ConfigureLogger()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("server %s not ready for connections after 10s", opts.ServerName)
	}
	<-sigs
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}
