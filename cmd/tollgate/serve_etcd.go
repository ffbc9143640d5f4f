package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tollgate/tollgate/internal/election"
	"github.com/tollgate/tollgate/limiter"
	"github.com/tollgate/tollgate/proto/tollgate/v1/shard"
	"github.com/tollgate/tollgate/server"
)

// etcdPasswordEnv is read when --etcd-password is not given.
const etcdPasswordEnv = "TOLLGATE_ETCD_PASSWORD"

// etcdOptions are the flags of a server of a cluster (serve --etcd).
type etcdOptions struct {
	endpoints  string
	advertise  string
	prefix     string
	cacert     string
	cert       string
	key        string
	user       string
	password   string
	sessionTTL time.Duration
	shards     int
}

const etcdHelp = `
Several servers (high availability): with --etcd, the servers given the same
--etcd and --etcd-prefix form a cluster. etcd elects one leader, which
serves; the others answer every call with UNAVAILABLE (NOT_LEADER) naming
the leader's --advertise address, and report tollgate.v1.LimiterService
NOT_SERVING to health checks. Pools and their write-ahead reservations live
in etcd instead of --data-dir; --config seeds them once for the cluster. A
new leader starts as a restarted server does (recovery window). With
--shards N (fixed when the cluster is created) the pools are spread over N
shards, each led by one server: a call for a pool goes to its shard's
leader, and the others answer NOT_LEADER naming it. See docs/ha.md.
`

func (o *etcdOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.endpoints, "etcd", "", "run as one server of a cluster: etcd client URLs, comma-separated (e.g. http://127.0.0.1:2379); --data-dir is then not used")
	f.StringVar(&o.advertise, "advertise", "", "with --etcd: the host:port clients reach this server at (required); followers name the leader by it")
	f.StringVar(&o.prefix, "etcd-prefix", server.DefaultEtcdPrefix, "with --etcd: the prefix of the cluster's keys in etcd")
	f.StringVar(&o.cacert, "etcd-cacert", "", "with --etcd: CA certificate to verify etcd's TLS certificate (PEM)")
	f.StringVar(&o.cert, "etcd-cert", "", "with --etcd: client certificate for etcd (PEM)")
	f.StringVar(&o.key, "etcd-key", "", "with --etcd: the client certificate's key (PEM)")
	f.StringVar(&o.user, "etcd-user", "", "with --etcd: etcd user name")
	f.StringVar(&o.password, "etcd-password", "", "with --etcd: etcd password (default: $"+etcdPasswordEnv+")")
	f.DurationVar(&o.sessionTTL, "etcd-session-ttl", server.DefaultSessionTTL, "with --etcd: TTL of this server's etcd session, in whole seconds: a leader that dies is replaced about this long after")
	f.IntVar(&o.shards, "shards", 1, fmt.Sprintf("with --etcd: the number of shards the pools are spread over, 1 to %d, each led by one server (a pool's shard is FNV-1a-32 of its name mod the count); read by the server that creates the cluster: the others use the count stored in etcd, and warn when theirs differs", shard.MaxCount))
}

// enabled reports whether --etcd was given.
func (o *etcdOptions) enabled() bool { return o.endpoints != "" }

// check validates the flags before anything is started.
func (o *etcdOptions) check() error {
	if !o.enabled() {
		for name, v := range map[string]string{"--advertise": o.advertise, "--etcd-cacert": o.cacert, "--etcd-cert": o.cert, "--etcd-key": o.key, "--etcd-user": o.user} {
			if v != "" {
				return fmt.Errorf("%s needs --etcd", name)
			}
		}
		if o.shards != 1 {
			return errors.New("--shards needs --etcd: a server alone has one shard")
		}
		return nil
	}
	if o.shards < 1 || o.shards > shard.MaxCount {
		return fmt.Errorf("--shards must be 1 to %d, not %d", shard.MaxCount, o.shards)
	}
	if o.advertise == "" {
		return errors.New("--etcd needs --advertise HOST:PORT: the address clients reach this server at")
	}
	if o.sessionTTL < time.Second || o.sessionTTL%time.Second != 0 {
		return fmt.Errorf("--etcd-session-ttl must be a whole number of seconds, at least 1s, not %v", o.sessionTTL)
	}
	if (o.cert == "") != (o.key == "") {
		return errors.New("--etcd-cert and --etcd-key go together")
	}
	if !strings.HasSuffix(o.prefix, "/") {
		return fmt.Errorf("--etcd-prefix %q must end with /", o.prefix)
	}
	return nil
}

// client connects to etcd.
func (o *etcdOptions) client() (*clientv3.Client, error) {
	var tlsCfg *tls.Config
	if o.cacert != "" || o.cert != "" {
		info := transport.TLSInfo{CertFile: o.cert, KeyFile: o.key, TrustedCAFile: o.cacert}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	password := o.password
	if password == "" {
		password = os.Getenv(etcdPasswordEnv)
	}
	var eps []string
	for _, ep := range strings.Split(o.endpoints, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			eps = append(eps, ep)
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, TLS: tlsCfg,
		Username: o.user, Password: password, Logger: zap.NewNop(), DialOptions: election.DialOptions(o.sessionTTL)})
	if err != nil {
		return nil, fmt.Errorf("--etcd %s: %w", o.endpoints, err)
	}
	return c, nil
}

// open returns a server of the cluster and a function that closes its
// etcd client once it has stopped.
func (o *etcdOptions) open(cfg server.Config, pools []limiter.PoolConfig) (*server.Server, func(), error) {
	c, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	cfg.Advertise = o.advertise
	srv, err := server.OpenCluster(cfg, server.ClusterConfig{Client: c, Prefix: o.prefix, SessionTTL: o.sessionTTL, Shards: o.shards}, pools)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("--etcd %s: %w (is etcd running there, and do --etcd-cacert/--etcd-cert/--etcd-user match it?)", o.endpoints, err)
	}
	return srv, func() { c.Close() }, nil
}
