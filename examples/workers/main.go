// Command workers shows a passive pool: worker processes offer their job
// slots to Tollgate, and submitters send each job to a slot that Tollgate
// hands them, so that no worker ever runs more jobs than it has slots,
// however many submitters there are. When a worker dies, its slots leave
// the pool, the submitters that held them are told, and they send those
// jobs to another worker.
//
//	workers -tollgate ADDR -pool render serve -id w1 -slots 2
//	workers -tollgate ADDR -pool render submit -jobs 40 -parallel 6
//
// The pool must exist and be passive:
//
//	tollgate pool create render --kind passive --selection spread
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate/tollgate/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "workers:", err)
		os.Exit(1)
	}
}

// run runs the command line args until ctx ends (serve) or the jobs are
// done (submit).
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("workers", flag.ContinueOnError)
	addr := fs.String("tollgate", client.ServerFromEnv(), "Tollgate server address; default $TOLLGATE_SERVER or "+client.DefaultServer)
	pool := fs.String("pool", "render", "the passive pool of job slots")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("give a command: serve or submit")
	}
	switch cmd, rest := fs.Arg(0), fs.Args()[1:]; cmd {
	case "serve":
		return serve(ctx, *addr, *pool, rest, out)
	case "submit":
		return submit(ctx, *addr, *pool, rest, out)
	default:
		return fmt.Errorf("unknown command %q: use serve or submit", cmd)
	}
}
