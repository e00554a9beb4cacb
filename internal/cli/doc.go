// Package cli implements skbtrace's commands, one file per subcommand.
// Exit codes: 0 success, 1 failure, 2 usage error.
package cli
