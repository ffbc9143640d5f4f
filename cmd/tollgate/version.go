package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release, set when building one:
//
//	go build -ldflags "-X main.version=v1.2.3" ./cmd/tollgate
//
// Without it, the module version from the build info is used ("(devel)"
// in a checkout).
var version = ""

// versionString is "tollgate <version> (<commit>[, modified], <go version>
// <os>/<arch>)" from version and the binary's build info.
func versionString() string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	if rev == "" {
		rev = "unknown commit"
	} else if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += ", modified"
	}
	return fmt.Sprintf("tollgate %s (%s, %s %s/%s)", v, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build of this binary",
		Long: `Print tollgate's version (set at build time with
-ldflags "-X main.version=v1.2.3", else the module version), the commit it
was built from, and the Go version and platform. tollgate --version prints
the same.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionString())
			return err
		},
	}
}
