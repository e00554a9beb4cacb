// Command skbtrace traces why the Linux network stack moves fewer bytes than the link allows.
package main

import (
	"os"

	"github.com/skbtrace/skbtrace/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
