'use strict';
// Tollgate's Node.js client: leases of concurrency permits and rate tokens
// from a Tollgate server, with a promise API.
//
//   const {Client} = require('@tollgate/client');
//   const client = new Client('127.0.0.1:7070');
//   await client.withLease('orders-db', {ttlMs: 10000}, async (lease) => {
//     await write({fencingToken: lease.fencingToken});
//   });
//   await client.take('api.example.com', {tokens: 1, maxWaitMs: 2000});
//   client.close();

const path = require('path');
const {EventEmitter} = require('events');
const os = require('os');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const {TollgateError, LeaseLost, fromGrpcError} = require('./errors');

const DEFAULT_PORT = 7070;
const DEFAULT_TTL_MS = 15000;

// The API's .proto files: the copy npm pack puts in the package (its
// prepack script, sync-proto), or, in a checkout, the repository's own.
const fs = require('fs');
const PROTO_DIR = fs.existsSync(path.join(__dirname, 'proto')) ? path.join(__dirname, 'proto') : path.join(__dirname, '..', '..', 'proto');

const api = grpc.loadPackageDefinition(protoLoader.loadSync(['tollgate/v1/limiter.proto', 'tollgate/v1/admin.proto'], {
  includeDirs: [PROTO_DIR],
  keepCase: true,
  longs: String, // int64 and uint64 as decimal strings: fencing tokens can exceed 2^53
  enums: String,
  defaults: false,
  oneofs: true,
})).tollgate.v1;

// parseAddresses returns host:port addresses from 'a:1,b:2' or an array;
// an address without a port gets 7070.
function parseAddresses(addresses) {
  const list = (Array.isArray(addresses) ? addresses : String(addresses).split(','))
    .map((a) => a.trim()).filter((a) => a !== '');
  if (list.length === 0) throw new TypeError('no server address given');
  return list.map((a) => {
    if (a.includes('://')) {
      throw new TypeError(`server address ${JSON.stringify(a)} has a scheme: give host:port (for example ${a.split('://')[1].replace(/\/+$/, '')})`);
    }
    const colon = a.lastIndexOf(':');
    if (colon < 0 || a.slice(colon).includes(']')) return `${a}:${DEFAULT_PORT}`;
    if (!/^\d+$/.test(a.slice(colon + 1))) throw new TypeError(`server address ${JSON.stringify(a)}: the port must be a number`);
    return a;
  });
}

// shardOf returns the shard of the pool named pool in a cluster of count
// shards (GetCluster's shard_count): FNV-1a-32 of the name's UTF-8 bytes,
// mod count. A count below 2 means one shard, 0.
function shardOf(pool, count) {
  if (!(count > 1)) return 0;
  let h = 0x811c9dc5;
  for (const b of Buffer.from(pool, 'utf8')) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h % count;
}

// MAX_ROUTES bounds the pools whose server a client remembers from
// NOT_LEADER answers; past it, it forgets them all and learns again.
const MAX_ROUTES = 4096;
// MAP_REFRESH_MS is the least time between two reads of the shard map.
const MAP_REFRESH_MS = 1000;

const duration = (ms) => ({seconds: String(Math.floor(ms / 1000)), nanos: Math.round((ms % 1000) * 1e6)});
const toMs = (d) => (d ? Number(d.seconds || 0) * 1000 + (d.nanos || 0) / 1e6 : 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// A holder treats its lease as lost this long before its expiry by its own
// clock when it cannot renew: a tenth of the TTL, at least 100 ms.
const safetyMarginMs = (ttlMs) => Math.max(ttlMs / 10, 100);

// Client is a connection to a Tollgate server, or to the servers of a
// cluster. A call about a pool goes to the server that leads the pool's
// shard: the one a NOT_LEADER answer named last for that pool, else the
// owner of its shard in the cluster's shard map (GetCluster, read when the
// client starts and again, at most once a second, after a NOT_LEADER),
// else the server that answered last. A NOT_LEADER answer (nothing
// applied) sends the call again to the server it names; an address where
// no server listens, to the next one. Without an admin token on a server
// that checks them, the map cannot be read, and the answers alone route
// the calls. Options:
// credentials (grpc.credentials.createSsl(...) for TLS), token (the admin
// token, sent as a bearer token), clientId (default node@HOST-PID),
// timeoutMs (every call but an acquire's wait in the queue; default 10 s).
class Client {
  constructor(addresses, {credentials = null, token = null, clientId = null, timeoutMs = 10000} = {}) {
    this.addresses = parseAddresses(addresses);
    this.current = this.addresses[0];
    this.credentials = credentials || grpc.credentials.createInsecure();
    this.token = token;
    this.clientId = clientId || `node@${os.hostname()}-${process.pid}`;
    this.timeoutMs = timeoutMs;
    this.stubs = new Map();
    this.admins = new Map();
    this.routes = new Map(); // pool → the server a NOT_LEADER answer named
    this.shardMap = null; // {count, owners}: GetCluster's shard map
    this.mapReadAt = -Infinity;
    this.mapReading = null;
  }

  stub(address) {
    let s = this.stubs.get(address);
    if (!s) {
      s = new api.LimiterService(address, this.credentials);
      this.stubs.set(address, s);
    }
    return s;
  }

  metadata() {
    const md = new grpc.Metadata();
    if (this.token) md.set('authorization', `Bearer ${this.token}`);
    return md;
  }

  // readShardMap reads GetCluster's shard map from the server that
  // answered last (or that a NOT_LEADER answer named), at most once every MAP_REFRESH_MS; a server that
  // refuses it (no admin token, a server before shards) leaves the
  // routing to NOT_LEADER answers.
  readShardMap() {
    if (this.mapReading || Date.now() - this.mapReadAt < MAP_REFRESH_MS) return this.mapReading;
    this.mapReadAt = Date.now();
    const address = this.current;
    let admin = this.admins.get(address);
    if (!admin) {
      admin = new api.AdminService(address, this.credentials);
      this.admins.set(address, admin);
    }
    this.mapReading = new Promise((resolve) => {
      admin.GetCluster({}, this.metadata(), {deadline: Date.now() + Math.min(this.timeoutMs, 2000)}, (err, resp) => {
        this.mapReading = null;
        if (!err && resp.shard_count > 1) {
          const owners = new Array(resp.shard_count).fill('');
          for (const o of resp.shards || []) {
            if (o.shard >= 0 && o.shard < owners.length) owners[o.shard] = o.moving_to || o.owner || '';
          }
          this.shardMap = {count: resp.shard_count, owners};
        }
        resolve();
      });
    });
    return this.mapReading;
  }

  // addressOf returns the server a call about pool goes to.
  addressOf(pool) {
    if (pool === undefined) return this.current;
    const routed = this.routes.get(pool);
    if (routed) return routed;
    if (this.shardMap) {
      const owner = this.shardMap.owners[shardOf(pool, this.shardMap.count)];
      if (owner) return owner;
    }
    return this.current;
  }

  // call sends a unary call, following NOT_LEADER hints and moving past
  // addresses where no server listens, within timeoutMs (null: none).
  async call(method, request, timeoutMs) {
    const deadline = timeoutMs == null ? Infinity : Date.now() + timeoutMs;
    const tried = new Map();
    const pool = request.pool;
    if (this.shardMap === null && pool !== undefined) await this.readShardMap();
    for (let attempt = 1; ; attempt++) {
      const address = this.addressOf(pool);
      try {
        return await new Promise((resolve, reject) => {
          this.stub(address)[method](request, this.metadata(), {deadline}, (err, resp) => (err ? reject(err) : resolve(resp)));
        });
      } catch (e) {
        const err = fromGrpcError(e);
        const delay = this.nextStep(err, attempt, tried, address, pool);
        if (Date.now() >= deadline) throw err;
        await sleep(delay);
      }
    }
  }

  // nextStep returns the delay before the next attempt after err from
  // address about pool (undefined: a call about no pool), or throws the
  // error to give the caller.
  nextStep(err, attempt, tried, address = this.current, pool = undefined) {
    if (err.reason === 'NOT_LEADER') {
      const leader = err.metadata.leader || '';
      if (leader !== '') {
        if (!this.addresses.includes(leader)) this.addresses.push(leader);
        this.current = leader; // a server of the cluster that answers
        if (pool !== undefined) {
          if (this.routes.size >= MAX_ROUTES) this.routes.clear();
          this.routes.set(pool, leader);
        }
      }
      if (pool !== undefined) this.readShardMap();
      if (leader !== '') return attempt < 2 * this.addresses.length ? 0 : 100;
      if (pool !== undefined) this.routes.delete(pool);
      return err.retryAfterMs || 100;
    }
    if (err.code === grpc.status.UNAVAILABLE && err.reason === '') {
      tried.set(address, err.details);
      if (pool !== undefined) {
        this.routes.delete(pool);
        if (this.shardMap) this.shardMap.owners[shardOf(pool, this.shardMap.count)] = '';
      }
      const i = this.addresses.indexOf(address);
      this.current = this.addresses[(i + 1) % this.addresses.length];
      if (tried.size >= this.addresses.length && attempt >= 2 * this.addresses.length) {
        const last = [...tried].map(([a, m]) => `${a}: ${m}`).join('; ');
        throw new TollgateError(grpc.status.UNAVAILABLE,
          `no Tollgate server answered at ${this.addresses.join(', ')} (is one running there?); ${last}`);
      }
      return attempt >= this.addresses.length ? 50 : 0;
    }
    throw err;
  }

  // acquire resolves to a Lease of weight permits of pool, renewed in the
  // background until released. Options: weight (1), ttlMs (15 s), waitMs
  // (longest wait in the queue; null: until granted), noWait, priority,
  // description.
  async acquire(pool, {weight = 1, ttlMs = DEFAULT_TTL_MS, waitMs = null, noWait = false, priority = 0, description = ''} = {}) {
    const req = {pool, weight: String(weight), ttl: duration(ttlMs), priority, client_id: this.clientId, description, no_wait: noWait};
    let timeout = null;
    if (waitMs != null) {
      req.wait_timeout = duration(waitMs);
      timeout = waitMs + this.timeoutMs;
    }
    if (noWait) timeout = this.timeoutMs;
    const sent = Date.now();
    const {lease} = await this.call('Acquire', req, timeout);
    // The lease counts from the send time, unless the acquire waited in the
    // pool's queue longer than the safety margin: then from the answer's
    // time, since the grant came at most one network transit before it,
    // which the margin covers.
    const received = Date.now();
    return new Lease(this, lease, received - sent <= safetyMarginMs(ttlMs) ? sent : received);
  }

  // withLease acquires a lease, runs fn(lease), and releases the lease
  // however fn ends; it resolves to fn's result. A lease lost while fn ran
  // rejects with LeaseLost (unless fn itself threw).
  async withLease(pool, opts, fn) {
    const lease = await this.acquire(pool, opts);
    let result;
    try {
      result = await fn(lease);
    } catch (e) {
      await lease.release().catch(() => {});
      throw e;
    }
    await lease.release();
    return result;
  }

  // take resolves to {tokens, waitedMs}: tokens taken from pool's token
  // bucket, waiting at most maxWaitMs for them (null: the server's default).
  async take(pool, {tokens = 1, maxWaitMs = null} = {}) {
    const req = {pool, tokens: String(tokens)};
    if (maxWaitMs != null) req.max_wait = duration(maxWaitMs);
    const resp = await this.call('Take', req, this.timeoutMs + (maxWaitMs || 0));
    return {tokens: Number(resp.tokens), waitedMs: toMs(resp.waited)};
  }

  close() {
    for (const s of [...this.stubs.values(), ...this.admins.values()]) s.close();
    this.stubs.clear();
    this.admins.clear();
  }
}

// Lease is a lease of permits, renewed every third of its TTL until it is
// released. A renewal that finds it gone (expired, revoked, not re-adopted
// after a restart), or none that succeeds before its expiry less a safety
// margin by this process's clock, loses it: lost becomes true, lostReason
// says why, 'lost' is emitted, and check() and release() throw LeaseLost.
// Stop the work then: another holder may have the permits. Pass
// fencingToken (a BigInt) to the protected system.
class Lease extends EventEmitter {
  constructor(client, lease, sent) {
    super();
    this.client = client;
    this.lease = lease;
    this.pool = lease.pool;
    this.lost = false;
    this.lostReason = '';
    this.released = false;
    this.renewed(sent);
    this.loop = this.keepAlive();
  }

  get id() { return this.lease.id; }
  get fencingToken() { return BigInt(this.lease.fencing_token); }
  get weight() { return Number(this.lease.weight); }
  get resources() { return (this.lease.resources || []).map((r) => r.id); }
  get ttlMs() { return toMs(this.lease.ttl); }

  renewed(sent) {
    this.renewedAt = sent;
    this.deadline = sent + this.ttlMs - safetyMarginMs(this.ttlMs);
  }

  lose(why) {
    this.lost = true;
    this.lostReason = why;
    this.emit('lost', new LeaseLost(why, {pool: this.pool, lease_id: this.id}));
  }

  async keepAlive() {
    while (!this.released) {
      const wake = this.renewedAt + this.ttlMs / 3 - Date.now();
      await new Promise((r) => { this.wakeUp = r; this.timer = setTimeout(r, Math.max(0, wake)); });
      while (!this.released) {
        const sent = Date.now();
        if (sent >= this.deadline) {
          this.lose(`lease ${this.id} of pool ${this.pool} could not be renewed before its deadline`);
          return;
        }
        try {
          // What was granted and the latest receipt, so that a restarted
          // server or a new leader re-adopts the lease as it was.
          const {lease} = await this.client.call('Renew', {
            pool: this.pool, lease_id: this.id, ttl: this.lease.ttl, weight: this.lease.weight,
            client_id: this.lease.client_id, description: this.lease.description, priority: this.lease.priority,
            resource_ids: this.resources, expiry_receipt: this.lease.expiry_receipt,
          }, Math.min(this.ttlMs / 3, this.deadline - sent));
          if (this.released) return;
          this.lease = lease;
          this.renewed(sent);
          break;
        } catch (err) {
          if (this.released) return;
          if (err.code === grpc.status.NOT_FOUND) {
            this.lose(err.details);
            return;
          }
          await sleep(Math.min(200, this.ttlMs / 10));
        }
      }
    }
  }

  // check throws LeaseLost if the lease was lost.
  check() {
    if (this.lost) throw new LeaseLost(this.lostReason, {pool: this.pool, lease_id: this.id});
  }

  // release stops the renewals and releases the lease; it throws LeaseLost
  // when the lease was lost while held.
  async release() {
    if (this.released) return;
    this.released = true;
    clearTimeout(this.timer);
    if (this.wakeUp) this.wakeUp();
    await this.loop;
    try {
      await this.client.call('Release', {pool: this.pool, lease_id: this.id}, this.client.timeoutMs);
    } catch (err) {
      if (err.code !== grpc.status.NOT_FOUND) throw err;
      if (!this.lost) {
        this.lost = true;
        this.lostReason = err.details;
      }
    }
    this.check();
  }
}

module.exports = {Client, Lease, TollgateError, LeaseLost, parseAddresses, shardOf, status: grpc.status};
