'use strict';
// Tollgate's errors, read from the rich gRPC status the server sends: a
// google.rpc.Status in the grpc-status-details-bin trailer, with a
// google.rpc.ErrorInfo (a reason such as POOL_NOT_FOUND or NOT_LEADER, and
// metadata such as the leader's address) and, when retrying makes sense, a
// google.rpc.RetryInfo. The three messages are declared here, so the package
// needs no googleapis package.

const grpc = require('@grpc/grpc-js');
const protobuf = require('protobufjs');

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

// TollgateError is a call the server (or the connection to it) refused.
// code is the gRPC status code (grpc.status), codeName its name; reason the
// ErrorInfo reason ('' when the status carried none, as for a connection
// that failed); metadata its metadata (pool, lease_id, leader, ...);
// retryAfterMs what RetryInfo says to wait before retrying, or null.
class TollgateError extends Error {
  constructor(code, message, reason = '', metadata = {}, retryAfterMs = null) {
    super(`${message} (${grpc.status[code]}${reason ? ' ' + reason : ''})`);
    this.name = 'TollgateError';
    this.code = code;
    this.codeName = grpc.status[code];
    this.details = message;
    this.reason = reason;
    this.metadata = metadata;
    this.retryAfterMs = retryAfterMs;
  }
}

// LeaseLost: the server no longer holds the lease for us (it expired, was
// revoked, or could not be renewed in time): stop the work it protects.
class LeaseLost extends TollgateError {
  constructor(message, metadata) {
    super(grpc.status.NOT_FOUND, message, 'LEASE_LOST', metadata);
    this.name = 'LeaseLost';
  }
}

// fromGrpcError returns the TollgateError of an error from @grpc/grpc-js.
function fromGrpcError(err) {
  let reason = '';
  let metadata = {};
  let retryAfterMs = null;
  const raw = err.metadata && err.metadata.get('grpc-status-details-bin');
  if (raw && raw.length > 0) {
    try {
      for (const d of RpcStatus.decode(raw[0]).details) {
        if (d.type_url.endsWith('/google.rpc.ErrorInfo')) {
          const info = ErrorInfo.decode(d.value);
          reason = info.reason;
          metadata = {...info.metadata};
        } else if (d.type_url.endsWith('/google.rpc.RetryInfo')) {
          const r = RetryInfo.decode(d.value).retry_delay || {};
          retryAfterMs = Number(r.seconds || 0) * 1000 + (r.nanos || 0) / 1e6;
        }
      }
    } catch (_) {
      // A malformed trailer leaves the plain status.
    }
  }
  return new TollgateError(err.code, err.details || grpc.status[err.code], reason, metadata, retryAfterMs);
}

module.exports = {TollgateError, LeaseLost, fromGrpcError};
