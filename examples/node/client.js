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
        protobuf: {nested: {Any: {fields: {type_url: {type: 'string', id: 1}, value: {type: 'bytes', id: 2}}}}},
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
          },
        },
      },
    },
  },
});
const RpcStatus = rpcTypes.lookupType('google.rpc.Status');
const ErrorInfo = rpcTypes.lookupType('google.rpc.ErrorInfo');

// errorInfo returns the google.rpc.ErrorInfo of a gRPC error, or null.
function errorInfo(err) {
  const raw = err.metadata && err.metadata.get('grpc-status-details-bin');
  if (!raw || raw.length === 0) return null;
  const st = RpcStatus.decode(raw[0]);
  for (const d of st.details) {
    if (d.type_url === 'type.googleapis.com/google.rpc.ErrorInfo') {
      return ErrorInfo.decode(d.value);
    }
  }
  return null;
}

// call turns a unary method of a grpc-js client into a promise, with a
// deadline of timeoutMs.
function call(stub, method, request, timeoutMs = 10000) {
  return new Promise((resolve, reject) => {
    stub[method](request, {deadline: Date.now() + timeoutMs}, (err, resp) => (err ? reject(err) : resolve(resp)));
  });
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
function keepAlive(stub, lease, onLost) {
  const everyMs = (seconds(lease.ttl) * 1000) / 3;
  const timer = setInterval(async () => {
    try {
      // weight and the latest expiry_receipt let a restarted server
      // re-adopt the lease (docs/recovery.md).
      const r = await call(stub, 'Renew', {pool: lease.pool, lease_id: lease.id, weight: lease.weight, expiry_receipt: lease.expiry_receipt});
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
  const [addr = '127.0.0.1:7070', pool = 'orders-db'] = process.argv.slice(2);
  const stub = new tollgate.LimiterService(addr, grpc.credentials.createInsecure());
  try {
    // 1. Acquire: wait in the pool's queue for at most 5s.
    const {lease} = await call(stub, 'Acquire', {
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
    const stop = keepAlive(stub, lease, (err) => { lost = err; });
    const renewed = await call(stub, 'Renew', {pool, lease_id: lease.id, ttl: {seconds: 5}});
    console.log(`renewed lease ${renewed.lease.id} ttl=${seconds(renewed.lease.ttl)}s fencing_token=${renewed.lease.fencing_token}`);
    await new Promise((r) => setTimeout(r, 100)); // the work
    stop();
    if (lost) throw lost;

    // 3. Release: the permit goes back to the pool at once.
    await call(stub, 'Release', {pool, lease_id: lease.id});
    console.log(`released lease ${lease.id}`);

    // 4. Errors carry a google.rpc.ErrorInfo whose reason programs switch on.
    try {
      await call(stub, 'Acquire', {pool: `${pool}-does-not-exist`});
    } catch (err) {
      const info = errorInfo(err);
      console.log(`error code=${grpc.status[err.code]} reason=${info ? info.reason : '?'} ` +
        `domain=${info ? info.domain : '?'} message=${JSON.stringify(err.details)}`);
    }
  } finally {
    stub.close();
  }
}

main().catch((err) => {
  const info = errorInfo(err);
  console.error(`tollgate: ${err.message}${info ? ` (${info.reason})` : ''}`);
  process.exit(1);
});
