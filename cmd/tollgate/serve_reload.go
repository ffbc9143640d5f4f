package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tollgate/tollgate/server"
)

// reloadSignals returns the channel on which serve learns to read its
// files again (SIGHUP) and a function that stops the notifications.
// Tests replace it.
var reloadSignals = func() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c, func() { signal.Stop(c) }
}

// reloadOn reloads the server's files on every signal of hup until ctx
// ends: see reload.
func (s *serveSecurity) reloadOn(ctx context.Context, hup <-chan os.Signal, srv *server.Server, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := s.reload(srv); err != nil {
				logger.Error("reload: kept what could not be read again; fix the files and send SIGHUP again", "err", err)
				continue
			}
			logger.Info("reloaded the TLS certificate, admin token and policy files")
		}
	}
}

// reload reads again the files serve read at start that may change while
// it runs: the TLS certificate and key (for new connections), the admin
// token file and the policy file (for new calls). What cannot be read is
// kept as it was. The client CA, the admin names and the listeners need a
// restart.
func (s *serveSecurity) reload(srv *server.Server) error {
	var errs []error
	if s.tls != nil {
		if err := s.tls.Reload(); err != nil {
			errs = append(errs, err)
		}
	}
	auth, err := s.opts.loadAuth(s.auth.ClientCerts)
	if err != nil {
		errs = append(errs, err)
	} else {
		s.auth = auth
		srv.SetAuth(auth)
	}
	return errors.Join(errs...)
}
