import {EventEmitter} from 'events';
import {ChannelCredentials, status} from '@grpc/grpc-js';

export {status};

export interface ClientOptions {
  /** grpc.credentials.createSsl(...) for TLS; plaintext by default. */
  credentials?: ChannelCredentials | null;
  /** The admin token, sent as "authorization: Bearer <token>". */
  token?: string | null;
  /** Names this process to operators; default node@HOST-PID. */
  clientId?: string | null;
  /** Bounds every call but an acquire's wait in the queue; default 10000. */
  timeoutMs?: number;
}

export interface AcquireOptions {
  weight?: number;
  ttlMs?: number;
  /** Longest wait in the pool's queue; null (the default) waits until granted. */
  waitMs?: number | null;
  noWait?: boolean;
  priority?: number;
  description?: string;
}

export class Client {
  constructor(addresses: string | string[], options?: ClientOptions);
  readonly addresses: string[];
  acquire(pool: string, options?: AcquireOptions): Promise<Lease>;
  withLease<T>(pool: string, options: AcquireOptions | undefined, fn: (lease: Lease) => Promise<T> | T): Promise<T>;
  take(pool: string, options?: {tokens?: number; maxWaitMs?: number | null}): Promise<{tokens: number; waitedMs: number}>;
  close(): void;
}

export class Lease extends EventEmitter {
  readonly pool: string;
  readonly id: string;
  readonly fencingToken: bigint;
  readonly weight: number;
  readonly resources: string[];
  readonly ttlMs: number;
  readonly lost: boolean;
  readonly lostReason: string;
  check(): void;
  release(): Promise<void>;
  on(event: 'lost', listener: (err: LeaseLost) => void): this;
}

export class TollgateError extends Error {
  readonly code: status;
  readonly codeName: string;
  readonly details: string;
  /** The server's ErrorInfo reason: POOL_NOT_FOUND, NO_CAPACITY, NOT_LEADER, ...; '' when none. */
  readonly reason: string;
  readonly metadata: Record<string, string>;
  readonly retryAfterMs: number | null;
}

export class LeaseLost extends TollgateError {}

export function parseAddresses(addresses: string | string[]): string[];
/** The shard of a pool in a cluster of count shards (GetCluster's shard_count): FNV-1a-32 of the name's UTF-8 bytes mod count. */
export function shardOf(pool: string, count: number): number;
