#!/usr/bin/env node
// A Node.js client of Tollgate: acquire a lease, keep it renewed while the
// work runs, release it, and read a Tollgate error's ErrorInfo reason.
//
// It uses @grpc/grpc-js and @grpc/proto-loader on the repository's own
// .proto files (../../proto), so nothing is generated. proto-loader brings
// the google/protobuf well-known types (Duration, Timestamp) itself.
//
//   npm ci
//   node client.js 127.0.0.1:7070 orders-db
//
// With several servers (serve --etcd), only the leader grants: a follower
// answers UNAVAILABLE with reason NOT_LEADER, naming the leader in the
// ErrorInfo metadata ("leader"). The client follows that hint: it calls the
// named leader instead, or, while no leader is known, calls again after the
// RetryInfo delay. Give it any server of the cluster (or a comma-separated
// list, tried in turn while no leader is named).
//
// It uses the unary RPCs (Acquire, Renew, Release), which is the simplest
// way to hold a lease. A long-lived service holding many leases should use
// the Session stream instead (one stream for all of a client's leases, and
// lease events as they happen), as the Go client does.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const PROTO_DIR = path.join(__dirname, '..', '..', 'proto');

const packageDefinition = protoLoader.loadSync('tollgate/v1/limiter.proto', {
  includeDirs: [PROTO_DIR],
  keepCase: true, // field names as in the .proto: lease_id, fencing_token
  longs: String, // int64 and uint64 as strings: fencing tokens can exceed 2^53
  enums: String,
  defaults: false,
  oneofs: true,
});
const tollgate = grpc.loadPackageDefinition(packageDefinition).tollgate.v1;

// google.rpc.Status and google.rpc.ErrorInfo, to read the error details a
// Tollgate error carries in its grpc-status-details-bin trailer. Only the
// fields used here are declared.
const rpcTypes = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Any: {fields: {type_url: {type: 'string', id: 1}, value: {type: 'bytes', id: 2}}},
            Duration: {fields: {seconds: {type: 'int64', id: 1}, nanos: {type: 'int32', id: 2}}},
          },
        },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: {type: 'int32', id: 1},
                message: {type: 'string', id: 2},
                details: {rule: 'repeated', type: 'google.protobuf.Any', id: 3},
              },
            },
            ErrorInfo: {
              fields: {
                reason: {type: 'string', id: 1},
                domain: {type: 'string', id: 2},
                metadata: {keyType: 'string', type: 'string', id: 3},
              },
            },
            RetryInfo: {fields: {retry_delay: {type: 'google.protobuf.Duration', id: 1}}},
          },
        },
      },
    },
  },
});
const RpcStatus = rpcTypes.lookupType('google.rpc.Status');
const ErrorInfo = rpcTypes.lookupType('google.rpc.ErrorInfo');
const RetryInfo = rpcTypes.lookupType('google.rpc.RetryInfo');

// detail returns the detail of a protobufjs type (ErrorInfo, RetryInfo)
// that a gRPC error carries, decoded, or null.
function detail(err, type) {
  const raw = err.metadata && err.metadata.get('grpc-status-details-bin');
  if (!raw || raw.length === 0) return null;
  const st = RpcStatus.decode(raw[0]);
  for (const d of st.details) {
    if (d.type_url === `type.googleapis.com/${type.fullName.slice(1)}`) {
      return type.decode(d.value);
    }
  }
  return null;
}

// errorInfo returns the google.rpc.ErrorInfo of a gRPC error, or null.
function errorInfo(err) {
  return detail(err, ErrorInfo);
}

// Conn is a connection to the cluster: a stub of the server it calls now,
// which moves to the leader a NOT_LEADER answer names.
class Conn {
  constructor(addrs) {
    this.addrs = addrs; // tried in turn while no leader is named
    this.next = 0;
    this.connect(addrs[0]);
  }

  connect(addr) {
    if (this.stub) this.stub.close();
    this.addr = addr;
    this.stub = new tollgate.LimiterService(addr, grpc.credentials.createInsecure());
  }

  close() {
    this.stub.close();
  }
}

// call turns a unary method into a promise, with a deadline of timeoutMs.
// A NOT_LEADER answer (the server is a follower; nothing was done) is
// followed within that deadline: the call goes to the leader it names, or,
// while none is known, to the next address after the RetryInfo delay.
async function call(conn, method, request, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (let followed = 0; ; followed++) {
    try {
      return await new Promise((resolve, reject) => {
        conn.stub[method](request, {deadline}, (err, resp) => (err ? reject(err) : resolve(resp)));
      });
    } catch (err) {
      const info = errorInfo(err);
      if (err.code !== grpc.status.UNAVAILABLE || !info || info.reason !== 'NOT_LEADER') throw err;
      const retry = detail(err, RetryInfo);
      const delayMs = retry && retry.retry_delay ? seconds(retry.retry_delay) * 1000 : 100;
      const leader = info.metadata.leader || '';
      // The first hint is followed at once; later ones (the leader changed
      // again, or a server's view is stale) after the delay.
      const waitMs = leader !== '' && followed === 0 ? 0 : delayMs;
      if (Date.now() + waitMs >= deadline) throw err;
      await new Promise((r) => setTimeout(r, waitMs));
      if (leader !== '' && leader !== conn.addr) {
        console.log(`${conn.addr} is not the leader; following the hint to ${leader} (epoch ${info.metadata.epoch})`);
        conn.connect(leader);
      } else {
        conn.next = (conn.next + 1) % conn.addrs.length;
        console.log(`${conn.addr} is not the leader and names none; trying ${conn.addrs[conn.next]} after ${waitMs}ms`);
        conn.connect(conn.addrs[conn.next]);
      }
    }
  }
}

// seconds turns a google.protobuf.Duration into seconds.
function seconds(d) {
  return Number(d.seconds || 0) + (d.nanos || 0) / 1e9;
}

// keepAlive renews the lease every third of its TTL until stop() is
// called. A renew that fails with NOT_FOUND means the lease is gone
// (expired, revoked): the holder must stop its work at once, which onLost
// is told. Other failures are retried at the next tick; a real holder also
// treats the lease as lost at expiry minus a safety margin by its own clock
// if it cannot renew.
function keepAlive(conn, lease, onLost) {
  const everyMs = (seconds(lease.ttl) * 1000) / 3;
  const timer = setInterval(async () => {
    try {
      // weight and the latest expiry_receipt let a restarted server
      // re-adopt the lease (docs/recovery.md).
      const r = await call(conn, 'Renew', {pool: lease.pool, lease_id: lease.id, weight: lease.weight, expiry_receipt: lease.expiry_receipt});
      lease.expiry_receipt = r.lease.expiry_receipt;
      console.log(`renewed lease ${r.lease.id} (background) expire_time=${r.lease.expire_time.seconds}s`);
    } catch (err) {
      if (err.code === grpc.status.NOT_FOUND) {
        clearInterval(timer);
        onLost(err);
      } else {
        console.error(`renew failed, retrying: ${err.message}`);
      }
    }
  }, everyMs);
  return () => clearInterval(timer);
}

async function main() {
  const [addrs = '127.0.0.1:7070', pool = 'orders-db'] = process.argv.slice(2);
  const conn = new Conn(addrs.split(','));
  try {
    // 1. Acquire: wait in the pool's queue for at most 5s.
    const {lease} = await call(conn, 'Acquire', {
      pool,
      ttl: {seconds: 3},
      wait_timeout: {seconds: 5},
      client_id: `node-${process.pid}`,
      description: 'Node.js example',
    });
    console.log(`acquired lease ${lease.id} pool=${lease.pool} weight=${lease.weight} ` +
      `fencing_token=${lease.fencing_token} ttl=${seconds(lease.ttl)}s`);

    // 2. Work while the lease is renewed in the background. Pass the
    // fencing token to the protected system with every write.
    let lost = null;
    const stop = keepAlive(conn, lease, (err) => { lost = err; });
    const renewed = await call(conn, 'Renew', {pool, lease_id: lease.id, ttl: {seconds: 5}});
    console.log(`renewed lease ${renewed.lease.id} ttl=${seconds(renewed.lease.ttl)}s fencing_token=${renewed.lease.fencing_token}`);
    await new Promise((r) => setTimeout(r, 100)); // the work
    stop();
    if (lost) throw lost;

    // 3. Release: the permit goes back to the pool at once.
    await call(conn, 'Release', {pool, lease_id: lease.id});
    console.log(`released lease ${lease.id}`);

    // 4. Errors carry a google.rpc.ErrorInfo whose reason programs switch on.
    try {
      await call(conn, 'Acquire', {pool: `${pool}-does-not-exist`});
    } catch (err) {
      const info = errorInfo(err);
      console.log(`error code=${grpc.status[err.code]} reason=${info ? info.reason : '?'} ` +
        `domain=${info ? info.domain : '?'} message=${JSON.stringify(err.details)}`);
    }
  } finally {
    conn.close();
  }
}

main().catch((err) => {
  const info = errorInfo(err);
  console.error(`tollgate: ${err.message}${info ? ` (${info.reason})` : ''}`);
  process.exit(1);
});
