"""Tollgate's errors, read from the rich gRPC status the server sends.

Every refusal carries a google.rpc.Status in the trailer
grpc-status-details-bin, with a google.rpc.ErrorInfo (domain tollgate.dev,
a reason such as POOL_NOT_FOUND or NOT_LEADER, and metadata such as the
leader's address) and, when retrying makes sense, a google.rpc.RetryInfo.
The three messages are described here in a private descriptor pool, so
the package needs no googleapis distribution and collides with none.
"""

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2

try:  # protobuf >= 4.21.? has GetMessageClass; older ones a factory.
    from google.protobuf.message_factory import GetMessageClass as _message_class
except ImportError:  # pragma: no cover - depends on the installed protobuf
    from google.protobuf import message_factory as _mf

    _factory = _mf.MessageFactory()

    def _message_class(desc):
        return _factory.GetPrototype(desc)


def _rpc_messages():
    pool = descriptor_pool.DescriptorPool()
    dur = descriptor_pb2.FileDescriptorProto()
    duration_pb2.DESCRIPTOR.CopyToProto(dur)
    pool.Add(dur)
    f = descriptor_pb2.FileDescriptorProto(
        name="tollgate_client/google_rpc.proto", package="google.rpc", syntax="proto3",
        dependency=["google/protobuf/duration.proto"])
    F = descriptor_pb2.FieldDescriptorProto

    def field(msg, name, number, type_, label=F.LABEL_OPTIONAL, type_name=""):
        fd = msg.field.add(name=name, number=number, type=type_, label=label)
        if type_name:
            fd.type_name = type_name

    any_ = f.message_type.add(name="Any")
    field(any_, "type_url", 1, F.TYPE_STRING)
    field(any_, "value", 2, F.TYPE_BYTES)
    status = f.message_type.add(name="Status")
    field(status, "code", 1, F.TYPE_INT32)
    field(status, "message", 2, F.TYPE_STRING)
    field(status, "details", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".google.rpc.Any")
    info = f.message_type.add(name="ErrorInfo")
    field(info, "reason", 1, F.TYPE_STRING)
    field(info, "domain", 2, F.TYPE_STRING)
    entry = info.nested_type.add(name="MetadataEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    field(info, "metadata", 3, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".google.rpc.ErrorInfo.MetadataEntry")
    retry = f.message_type.add(name="RetryInfo")
    field(retry, "retry_delay", 1, F.TYPE_MESSAGE, type_name=".google.protobuf.Duration")
    pool.Add(f)
    return tuple(_message_class(pool.FindMessageTypeByName("google.rpc." + n))
                 for n in ("Status", "ErrorInfo", "RetryInfo"))


_Status, _ErrorInfo, _RetryInfo = _rpc_messages()
_DETAILS_KEY = "grpc-status-details-bin"


class TollgateError(Exception):
    """A call the server (or the connection to it) refused.

    code is the grpc.StatusCode; reason the ErrorInfo reason
    (POOL_NOT_FOUND, NO_CAPACITY, NOT_LEADER, ...; "" when the status
    carried none, as for a connection that failed); metadata its metadata
    (pool, lease_id, leader, ...); retry_after the seconds RetryInfo says to
    wait before retrying, or None.
    """

    def __init__(self, code, message, reason="", metadata=None, retry_after=None):
        super().__init__("%s (%s%s)" % (message, code.name, " " + reason if reason else ""))
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
        self.retry_after = retry_after


class LeaseLost(TollgateError):
    """The server no longer holds the lease for us (it expired, was
    revoked, or could not be renewed in time): stop the work it protects."""


def from_rpc_error(err):
    """The TollgateError of a grpc.RpcError (sync or asyncio)."""
    code = err.code()
    message = err.details() or code.name
    reason, metadata, retry_after = "", {}, None
    trailers = err.trailing_metadata() or ()
    for key, value in trailers:
        if key != _DETAILS_KEY:
            continue
        status = _Status()
        try:
            status.ParseFromString(value)
        except Exception:  # a malformed trailer leaves the plain status
            break
        for d in status.details:
            if d.type_url.endswith("/google.rpc.ErrorInfo"):
                info = _ErrorInfo()
                info.ParseFromString(d.value)
                reason, metadata = info.reason, dict(info.metadata)
            elif d.type_url.endswith("/google.rpc.RetryInfo"):
                retry = _RetryInfo()
                retry.ParseFromString(d.value)
                retry_after = retry.retry_delay.ToNanoseconds() / 1e9
    return TollgateError(code, message, reason, metadata, retry_after)
