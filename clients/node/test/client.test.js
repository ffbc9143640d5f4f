'use strict';
// Tests of the packed and installed @tollgate/client against real servers.
// The Go test beside the package (TestNodeClientPackage) starts them and
// sets TOLLGATE_BIN, TOLLGATE_SERVER (a standalone server),
// TOLLGATE_CLUSTER (two servers of a cluster on etcd) and TOLLGATE_CLIENT
// (where the package it packed with npm pack was installed).

const test = require('node:test');
const assert = require('node:assert');
const {execFileSync, spawn} = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const {BIN, SERVER, CLUSTER, TOLLGATE_CLIENT} = {
  BIN: process.env.TOLLGATE_BIN, SERVER: process.env.TOLLGATE_SERVER,
  CLUSTER: process.env.TOLLGATE_CLUSTER, TOLLGATE_CLIENT: process.env.TOLLGATE_CLIENT,
};
const skip = !(BIN && SERVER && TOLLGATE_CLIENT) && 'run by the Go test TestNodeClientPackage, which starts the servers';
const tollgate = skip ? null : require(TOLLGATE_CLIENT);

const tg = (server, ...args) => execFileSync(BIN, ['--server', server, ...args], {encoding: 'utf8'});
function newPool(server, ...flags) {
  const name = `node-${crypto.randomBytes(4).toString('hex')}`;
  tg(server, 'pool', 'create', name, ...flags);
  return name;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('the packed package is what is tested', {skip}, () => {
  assert.ok(require.resolve(TOLLGATE_CLIENT).includes('node_modules'), require.resolve(TOLLGATE_CLIENT));
});

test('a lease is held, renewed past its TTL, and released', {skip}, async () => {
  const c = new tollgate.Client(SERVER);
  try {
    const pool = newPool(SERVER, '--concurrency', '1');
    const first = await c.withLease(pool, {ttlMs: 1500}, async (lease) => {
      assert.ok(lease.fencingToken > 0n);
      await sleep(3500); // more than two TTLs: only the renewals keep it
      lease.check();
      const err = await c.acquire(pool, {noWait: true}).then(() => null, (e) => e);
      assert.ok(err instanceof tollgate.TollgateError);
      assert.strictEqual(err.codeName, 'RESOURCE_EXHAUSTED');
      assert.strictEqual(err.reason, 'NO_CAPACITY');
      return lease.fencingToken;
    });
    const next = await c.acquire(pool);
    assert.ok(next.fencingToken > first);
    await next.release();
  } finally {
    c.close();
  }
});

test('a revoked lease is lost', {skip}, async () => {
  const c = new tollgate.Client(SERVER);
  try {
    const pool = newPool(SERVER, '--concurrency', '1');
    const lease = await c.acquire(pool, {ttlMs: 900});
    const lost = new Promise((resolve) => lease.on('lost', resolve));
    tg(SERVER, 'lease', 'revoke', pool, String(lease.fencingToken));
    const err = await Promise.race([lost, sleep(5000).then(() => null)]);
    assert.ok(err instanceof tollgate.LeaseLost, 'the revocation was not noticed');
    assert.ok(lease.lost && lease.lostReason);
    await assert.rejects(lease.release(), tollgate.LeaseLost);
  } finally {
    c.close();
  }
});

test('errors carry the reason', {skip}, async () => {
  const c = new tollgate.Client(SERVER);
  try {
    const err = await c.acquire('node-no-such-pool').then(() => null, (e) => e);
    assert.strictEqual(err.codeName, 'NOT_FOUND');
    assert.strictEqual(err.reason, 'POOL_NOT_FOUND');
    assert.strictEqual(err.metadata.pool, 'node-no-such-pool');
  } finally {
    c.close();
  }
  const none = new tollgate.Client('127.0.0.1:1', {timeoutMs: 2000});
  const err = await none.take('x').then(() => null, (e) => e);
  none.close();
  assert.strictEqual(err.codeName, 'UNAVAILABLE');
  assert.match(err.message, /no Tollgate server answered at 127\.0\.0\.1:1/);
  assert.throws(() => new tollgate.Client('http://localhost:7070'), /localhost:7070/);
});

test('take', {skip}, async () => {
  const c = new tollgate.Client(SERVER);
  try {
    const pool = newPool(SERVER, '--rate', '100', '--burst', '5');
    assert.strictEqual((await c.take(pool, {tokens: 5})).tokens, 5);
    const err = await c.take(pool, {tokens: 6}).then(() => null, (e) => e);
    assert.strictEqual(err.codeName, 'INVALID_ARGUMENT');
    assert.strictEqual((await c.take(pool, {tokens: 2, maxWaitMs: 1000})).tokens, 2);
  } finally {
    c.close();
  }
});

// The cluster has 4 shards over its 2 servers: pools of several shards
// reach their owner from either server.
test('the leader hint is followed', {skip: skip || !CLUSTER}, async () => {
  const pools = Array.from({length: 4}, () => newPool(CLUSTER, '--concurrency', '1'));
  for (const addr of CLUSTER.split(',')) {
    const c = new tollgate.Client(addr);
    try {
      for (const pool of pools) await c.withLease(pool, {}, (lease) => assert.ok(lease.fencingToken > 0n));
    } finally {
      c.close();
    }
  }
});

test('two processes share one limit', {skip}, async () => {
  const pool = newPool(SERVER, '--concurrency', '1');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tollgate-node-'));
  const record = path.join(dir, 'record');
  const worker = `
    const {Client} = require(${JSON.stringify(TOLLGATE_CLIENT)});
    const fs = require('fs');
    const [server, pool, hold, record] = process.argv.slice(1);
    (async () => {
      const c = new Client(server);
      for (let i = 0; i < 4; i++) {
        let start, end, token;
        await c.withLease(pool, {ttlMs: 2000}, async (lease) => {
          start = Date.now();
          await new Promise((r) => setTimeout(r, Number(hold)));
          lease.check();
          end = Date.now();
          token = lease.fencingToken;
        });
        fs.appendFileSync(record, start + ' ' + end + ' ' + token + '\\n');
      }
      c.close();
    })().catch((e) => { console.error(e); process.exit(1); });`;
  const run = (hold) => new Promise((resolve) => {
    const p = spawn(process.execPath, ['-e', worker, SERVER, pool, String(hold), record], {stdio: ['ignore', 'inherit', 'inherit']});
    p.on('exit', resolve);
  });
  assert.deepStrictEqual(await Promise.all([run(100), run(2500)]), [0, 0]);
  const sections = fs.readFileSync(record, 'utf8').trim().split('\n')
    .map((l) => l.split(' ')).map(([s, e, t]) => [Number(s), Number(e), BigInt(t)])
    .sort((a, b) => a[0] - b[0]);
  assert.strictEqual(sections.length, 8);
  for (let i = 1; i < sections.length; i++) {
    assert.ok(sections[i - 1][1] <= sections[i][0], `critical sections overlapped: ${sections.join(' | ')}`);
    assert.ok(sections[i - 1][2] < sections[i][2], `fencing tokens do not grow: ${sections.join(' | ')}`);
  }
});
