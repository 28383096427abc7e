//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "nodeexec: network namespaces and cgroups need Linux")
	os.Exit(126)
}
