'use strict';
// Tests of the client's routing in a sharded cluster. The Go test
// (TestNodeClientPackage) starts fake servers of a cluster of shards
// (internal/shardfake): TOLLGATE_SHARDED lists those that answer the shard
// map, TOLLGATE_SHARDED_NOMAP those that refuse it; it then counts the
// calls that reached a server not leading the pool's shard. They test the
// installed package when the Go test gives one (TOLLGATE_CLIENT), else
// the checkout.

const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');

const where = process.env.TOLLGATE_CLIENT || path.join(__dirname, '..');
const tollgate = require(where);

// The vectors of proto/tollgate/v1/shard (its test and docs/ha.md); the
// last two are UTF-8 names, for which Go's shard.Of gives 1 and 80.
test('shardOf matches the vectors', () => {
  for (const [pool, count, want] of [['', 16, 5], ['a', 16, 12], ['orders-db', 64, 21], ['pool-7', 64, 39],
    ['orders-db', 1, 0], ['orders-db', 0, 0], ['日本', 7, 1], ['名前', 256, 80]]) {
    assert.strictEqual(tollgate.shardOf(pool, count), want, `shardOf(${JSON.stringify(pool)}, ${count})`);
  }
});

const {TOLLGATE_SHARDED: SHARDED, TOLLGATE_SHARDED_NOMAP: NOMAP} = process.env;
const pools = Array.from({length: 16}, (_, i) => `pool-${i}`);

// Given one server of the cluster, calls about pools of every shard reach
// the pool's owner: straight from the shard map, or after one NOT_LEADER
// answer per pool when the map is refused (the answer is remembered).
for (const [name, addrs] of [['the shard map', SHARDED], ['NOT_LEADER answers alone', NOMAP]]) {
  test(`calls about each pool go to its shard's owner, routed by ${name}`, {skip: !addrs && 'run by TestNodeClientPackage, which starts the fake servers'}, async () => {
    const c = new tollgate.Client(addrs.split(',')[0]);
    try {
      for (const pool of pools) {
        assert.strictEqual((await c.take(pool, {tokens: 2})).tokens, 2);
        const lease = await c.acquire(pool, {ttlMs: 3000});
        assert.strictEqual(lease.pool, pool);
        await lease.release();
        assert.strictEqual((await c.take(pool)).tokens, 1);
      }
    } finally {
      c.close();
    }
  });
}
