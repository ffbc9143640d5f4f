#!/usr/bin/env node
// A Node.js service holding a Tollgate lease with @tollgate/client (the
// package in clients/node): acquire a lease, work while the package renews
// it, release it, and read a Tollgate error's reason.
//
//   npm ci
//   node client.js 127.0.0.1:7070 orders-db
//
// Give any server of a cluster, or several ('a:7070,b:7070'): the package
// sends the calls about a pool to the server that leads the pool's shard
// (from the cluster's shard map, or a NOT_LEADER answer, which applied
// nothing, naming it), and retries an address where no server listens on
// the next one.
'use strict';

const {Client, TollgateError} = require('@tollgate/client');

// workMs is how long the example works under its lease: longer than a
// third of the lease's TTL, so that the package renews it at least once.
const ttlMs = 3000;
const workMs = 1500;

async function main() {
  const [addrs = '127.0.0.1:7070', pool = 'orders-db'] = process.argv.slice(2);
  const client = new Client(addrs, {clientId: `node-${process.pid}`});
  try {
    // 1. Acquire: wait in the pool's queue for at most 5 s.
    const lease = await client.acquire(pool, {ttlMs, waitMs: 5000, description: 'Node.js example'});
    console.log(`acquired lease ${lease.id} pool=${lease.pool} weight=${lease.weight} ` +
      `fencing_token=${lease.fencingToken} ttl=${lease.ttlMs / 1000}s`);

    // 2. Work while the lease is renewed in the background. Pass the
    // fencing token to the protected system with every write; if the
    // lease is lost ('lost' event, check() throws), stop the work.
    lease.on('lost', (err) => console.error(`lost: ${err.message}`));
    await new Promise((r) => setTimeout(r, workMs));
    lease.check();

    // 3. Release: the permit goes back to the pool at once.
    await lease.release();
    console.log(`released lease ${lease.id}`);

    // 4. Errors are TollgateErrors whose reason programs switch on.
    try {
      await client.acquire(`${pool}-does-not-exist`, {noWait: true});
    } catch (err) {
      if (!(err instanceof TollgateError)) throw err;
      console.log(`error code=${err.codeName} reason=${err.reason} message=${JSON.stringify(err.details)}`);
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(`tollgate: ${err.message}`);
  process.exit(1);
});
