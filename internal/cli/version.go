package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/skbtrace/skbtrace/internal/version"
)

func versionCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "print the version, commit, build date, Go version and platform",
		Example: `  skbtrace version
  skbtrace version --json`,
		Long: `version prints which build this is: the version, the commit it was built
from, that commit's date (the build date of a release: builds of one commit
are byte-identical), the Go version and the platform.`,
		Args: noArgs,
		RunE: func(c *cobra.Command, args []string) error {
			v := version.Get()
			if asJSON {
				if err := json.NewEncoder(e.stdout).Encode(v); err != nil {
					return fmt.Errorf("writing the version: %w", err)
				}
				return nil
			}
			_, err := fmt.Fprintf(e.stdout, "skbtrace version %s\ncommit:   %s\nbuilt:    %s\ngo:       %s\nplatform: %s/%s\n",
				v.Version, orUnknown(v.Commit), orUnknown(v.Date), v.GoVersion, v.OS, v.Arch)
			if err != nil {
				return fmt.Errorf("writing the version: %w", err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object")
	return c
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
