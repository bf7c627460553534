#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# ferry-gcs driven from Python with no C: the messages come from `flatc --python` on schema/*.fbs
# and Debian's python3-flatbuffers, the framing from docs/wire.md. Checks what another language
# needs: the handshake with the cluster token, KV put (a GcsRecord in a GcsRequest) and get, a
# node registered (a table write) and read back, a subscription to a job's logs channel that
# receives a published line, an object added and a copy of it announced (records with arrays of
# IDs and of structs) that an object-location subscription receives, and a wrong token refused.
# Exit 77 (skip, with the reason printed) when flatc or python3-flatbuffers is missing.
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why):
    print('SKIP: ' + why)
    sys.exit(SKIP)


try:
    import flatbuffers
except ImportError:
    # A python3 other than Debian's (pyenv, a venv) does not see Debian's packages; the
    # flatbuffers runtime is pure Python, so Debian's copy serves any python3.
    sys.path.append('/usr/lib/python3/dist-packages')
    try:
        import flatbuffers
    except ImportError:
        skip('python3-flatbuffers is not installed (apt-get install python3-flatbuffers)')
FLATC = os.environ.get('FLATC') or shutil.which('flatc')
if not FLATC:
    skip('flatc is not installed (apt-get install flatbuffers-compiler)')
GCS_BIN = os.environ.get('FERRY_GCS_BIN')
SCHEMA_DIR = os.environ.get('FERRY_SCHEMA_DIR')
if not GCS_BIN or not SCHEMA_DIR:
    skip('run by meson: FERRY_GCS_BIN and FERRY_SCHEMA_DIR are not set')

TMP = tempfile.mkdtemp(prefix='ferry-gcs-py-')
subprocess.run([FLATC, '--python', '-o', TMP, '-I', SCHEMA_DIR] +
               [os.path.join(SCHEMA_DIR, f) for f in ('common.fbs', 'gcs.fbs', 'messages.fbs')],
               check=True)
sys.path.insert(0, TMP)
from ferry.wire import (GcsKvGet, GcsKvOp, GcsLogOp, GcsNode, GcsObject,  # noqa: E402
                        GcsObjectLocation, GcsObjectPlace, GcsOpType, GcsPublish, GcsRecord,
                        GcsReply, GcsRequest, GcsResources, GcsSubscribe, GcsTableGet,
                        Handshake, HandshakeReply, MessageType, ObjectId, PeerKind, UniqueId)

FRAME_MAGIC, FRAME_VERSION = 0xFE, 1
PROTOCOL_VERSION = 3
RECORD_PREFIX = b'\0\0\0\0'
RECORD_VERSION = 2
CH_OBJECT_LOCATIONS = 4
CH_LOGS = 6
KIND_DELTA, KIND_RESYNC, KIND_SNAPSHOT, KIND_SNAPSHOT_END = 0, 1, 2, 3
TABLE_NODES = 0
NODE_ALIVE = 1
TOKEN = b'python-test-token'


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


# ---- framing: magic, version, u16 type, u32 length (little-endian), then the payload ----

def send_frame(sock, mtype, payload):
    sock.sendall(struct.pack('<BBHI', FRAME_MAGIC, FRAME_VERSION, mtype, len(payload)) + payload)


def recv_exact(sock, n):
    out = b''
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def recv_frame(sock):
    head = recv_exact(sock, 8)
    if head is None:
        return None, None
    magic, version, mtype, length = struct.unpack('<BBHI', head)
    check(magic == FRAME_MAGIC and version == FRAME_VERSION, 'bad frame header %r' % head)
    return mtype, recv_exact(sock, length)


def vec(obj, name):
    n = getattr(obj, name + 'Length')()
    get = getattr(obj, name)
    return bytes(get(i) for i in range(n))


# ---- messages ----

def handshake(token):
    b = flatbuffers.Builder(64)
    tok = b.CreateByteVector(token)
    name = b.CreateString('test_gcs_python')
    Handshake.Start(b)
    Handshake.AddProtocolVersion(b, PROTOCOL_VERSION)
    Handshake.AddToken(b, tok)
    Handshake.AddPeerKind(b, PeerKind.PeerKind.Driver)
    Handshake.AddPeerId(b, UniqueId.CreateUniqueId(b, list(os.urandom(16))))
    Handshake.AddPid(b, os.getpid())
    Handshake.AddName(b, name)
    b.Finish(Handshake.End(b))
    return bytes(b.Output())


def connect(port, token):
    """A connection after the handshake, and the HandshakeReply's status (None: closed)."""
    sock = socket.create_connection(('127.0.0.1', port), timeout=10)
    send_frame(sock, MessageType.MessageType.Handshake, handshake(token))
    mtype, payload = recv_frame(sock)
    if mtype is None:
        return sock, None
    check(mtype == MessageType.MessageType.HandshakeReply,
          'expected HandshakeReply, got %d' % mtype)
    return sock, HandshakeReply.HandshakeReply.GetRootAs(payload, 0).Status()


def record(op_type, build_body, add_body):
    """A GCS record as bytes: the zero prefix, then a GcsRecord FlatBuffer."""
    b = flatbuffers.Builder(64)
    body = build_body(b)
    GcsRecord.Start(b)
    GcsRecord.AddVersion(b, RECORD_VERSION)
    GcsRecord.AddType(b, op_type)
    add_body(b, body)
    b.Finish(GcsRecord.End(b))
    return RECORD_PREFIX + bytes(b.Output())


def kv_put(ns, key, value):
    def body(b):
        n, k, v = b.CreateByteVector(ns), b.CreateByteVector(key), b.CreateByteVector(value)
        GcsKvOp.Start(b)
        GcsKvOp.AddNs(b, n)
        GcsKvOp.AddKey(b, k)
        GcsKvOp.AddValue(b, v)
        GcsKvOp.AddOverwrite(b, True)
        return GcsKvOp.End(b)
    return record(GcsOpType.GcsOpType.KvPut, body, GcsRecord.AddKv)


def log_line(job, data):
    def body(b):
        d = b.CreateByteVector(data)
        GcsLogOp.Start(b)
        GcsLogOp.AddJob(b, UniqueId.CreateUniqueId(b, list(job)))
        GcsLogOp.AddData(b, d)
        return GcsLogOp.End(b)
    return record(GcsOpType.GcsOpType.Log, body, GcsRecord.AddLog)


def node_register(node_id, address, cpu):
    def body(b):
        addr = b.CreateString(address)
        GcsResources.Start(b)
        GcsResources.AddCpu(b, cpu)
        total = GcsResources.End(b)
        GcsNode.Start(b)
        GcsNode.AddId(b, UniqueId.CreateUniqueId(b, list(node_id)))
        GcsNode.AddAddress(b, addr)
        GcsNode.AddTotal(b, total)
        GcsNode.AddState(b, NODE_ALIVE)
        GcsNode.AddStartMs(b, 1)
        return GcsNode.End(b)
    return record(GcsOpType.GcsOpType.NodeRegister, body, GcsRecord.AddNode)


def object_add(object_id, owner_worker, owner_node, size):
    def body(b):
        GcsObject.Start(b)
        GcsObject.AddId(b, ObjectId.CreateObjectId(b, list(object_id)))
        GcsObject.AddOwnerWorker(b, UniqueId.CreateUniqueId(b, list(owner_worker)))
        GcsObject.AddOwnerNode(b, UniqueId.CreateUniqueId(b, list(owner_node)))
        GcsObject.AddSizeBytes(b, size)
        return GcsObject.End(b)
    return record(GcsOpType.GcsOpType.ObjAdd, body, GcsRecord.AddObject)


def object_add_location(object_id, node_id, size, place):
    def body(b):
        GcsObjectLocation.Start(b)
        GcsObjectLocation.AddId(b, ObjectId.CreateObjectId(b, list(object_id)))
        GcsObjectLocation.AddNode(b, UniqueId.CreateUniqueId(b, list(node_id)))
        GcsObjectLocation.AddSizeBytes(b, size)
        GcsObjectLocation.AddPlace(b, GcsObjectPlace.CreateGcsObjectPlace(b, *place))
        return GcsObjectLocation.End(b)
    return record(GcsOpType.GcsOpType.ObjAddLocation, body, GcsRecord.AddObjectLocation)


def table_get(seq, table, row_id):
    b = flatbuffers.Builder(64)
    GcsTableGet.Start(b)
    GcsTableGet.AddSeq(b, seq)
    GcsTableGet.AddTable(b, table)
    GcsTableGet.AddId(b, UniqueId.CreateUniqueId(b, list(row_id)))
    b.Finish(GcsTableGet.End(b))
    return bytes(b.Output())


def parse_record(data):
    check(data[:4] == RECORD_PREFIX, 'not a GcsRecord: %r' % data[:8])
    rec = GcsRecord.GcsRecord.GetRootAs(data, 4)
    check(rec.Version() == RECORD_VERSION, 'record version %d' % rec.Version())
    return rec


def request(seq, op):
    b = flatbuffers.Builder(64)
    o = b.CreateByteVector(op)
    GcsRequest.Start(b)
    GcsRequest.AddSeq(b, seq)
    GcsRequest.AddOp(b, o)
    b.Finish(GcsRequest.End(b))
    return bytes(b.Output())


def kv_get(seq, ns, key):
    b = flatbuffers.Builder(64)
    n, k = b.CreateByteVector(ns), b.CreateByteVector(key)
    GcsKvGet.Start(b)
    GcsKvGet.AddSeq(b, seq)
    GcsKvGet.AddNs(b, n)
    GcsKvGet.AddKey(b, k)
    GcsKvGet.AddOp(b, 0)
    b.Finish(GcsKvGet.End(b))
    return bytes(b.Output())


def subscribe(seq, channel, key):
    b = flatbuffers.Builder(64)
    k = b.CreateByteVector(key)
    GcsSubscribe.Start(b)
    GcsSubscribe.AddSeq(b, seq)
    GcsSubscribe.AddChannel(b, channel)
    GcsSubscribe.AddKey(b, k)
    b.Finish(GcsSubscribe.End(b))
    return bytes(b.Output())


class Conn:
    """Replies by seq and published items, in whatever order the server sends them."""

    def __init__(self, sock):
        self.sock, self.replies, self.items = sock, {}, []

    def pump(self):
        mtype, payload = recv_frame(self.sock)
        check(mtype is not None, 'the GCS closed the connection')
        if mtype == MessageType.MessageType.GcsReply:
            r = GcsReply.GcsReply.GetRootAs(payload, 0)
            self.replies[r.Seq()] = (r.Status(), vec(r, 'Value'))
        elif mtype == MessageType.MessageType.GcsPublish:
            p = GcsPublish.GcsPublish.GetRootAs(payload, 0)
            for i in range(p.ItemsLength()):
                it = p.Items(i)
                self.items.append((it.Kind(), it.Channel(), vec(it, 'Key'), vec(it, 'Data')))
        else:
            fail('unexpected message type %d' % mtype)

    def call(self, mtype, seq, payload):
        send_frame(self.sock, mtype, payload)
        while seq not in self.replies:
            self.pump()
        return self.replies.pop(seq)


def start_gcs(tmp):
    token_file = os.path.join(tmp, 'token')
    with open(token_file, 'wb') as f:
        f.write(TOKEN + b'\n')
    proc = subprocess.Popen([GCS_BIN, '--port', '0', '--token-file', token_file],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith('ferry-gcs listening on port '):
        proc.kill()
        fail('ferry-gcs did not start: %r' % line)
    return proc, int(line.split()[-1])


def main():
    proc, port = start_gcs(TMP)
    try:
        sock, status = connect(port, TOKEN)
        check(status == 0, 'handshake with the right token: status %r' % status)
        c = Conn(sock)
        M = MessageType.MessageType

        status, _ = c.call(M.GcsRequest, 1, request(1, kv_put(b'py', b'greeting', b'hello')))
        check(status >= 0, 'KV put: status %d' % status)
        status, value = c.call(M.GcsKvGet, 2, kv_get(2, b'py', b'greeting'))
        check(status >= 0 and value == b'hello', 'KV get: status %d value %r' % (status, value))
        print('ok   kv_put_then_get')

        node_id = os.urandom(16)
        reg = node_register(node_id, '10.9.8.7:7000', 4)
        status, _ = c.call(M.GcsRequest, 10, request(10, reg))
        check(status >= 0, 'node register: status %d' % status)
        status, value = c.call(M.GcsTableGet, 11, table_get(11, TABLE_NODES, node_id))
        check(status >= 0, 'node lookup: status %d' % status)
        rec = parse_record(value)
        check(rec.Type() == GcsOpType.GcsOpType.RestoreNode, 'node lookup: type %d' % rec.Type())
        node = rec.Node()
        check(bytes(node.Id().Bytes()) == node_id, 'node lookup: wrong ID')
        check(node.Address() == b'10.9.8.7:7000', 'node lookup: address %r' % node.Address())
        check(node.Total().Cpu() == 4 and node.State() == NODE_ALIVE, 'node lookup: wrong record')
        print('ok   node_register_then_lookup')

        job = bytes([7] * 16)
        status, _ = c.call(M.GcsSubscribe, 3, subscribe(3, CH_LOGS, job))
        check(status >= 0, 'subscribe: status %d' % status)
        status, _ = c.call(M.GcsRequest, 4, request(4, log_line(job, b'a line from python')))
        check(status >= 0, 'log: status %d' % status)
        while not any(ch == CH_LOGS and data for _, ch, _, data in c.items):
            c.pump()
        data = next(d for _, ch, _, d in c.items if ch == CH_LOGS and d)
        rec = parse_record(data)
        check(rec.Type() == GcsOpType.GcsOpType.Log, 'published record: type %d' % rec.Type())
        log = rec.Log()
        check(bytes(log.Job().Bytes()) == job, 'published line: wrong job')
        check(vec(log, 'Data') == b'a line from python', 'published line: wrong data')
        print('ok   subscription_receives_a_log_line')

        object_id, owner = os.urandom(20), os.urandom(16)
        status, _ = c.call(M.GcsRequest, 20, request(20, object_add(object_id, owner, node_id,
                                                                    4096)))
        check(status >= 0, 'object add: status %d' % status)
        status, _ = c.call(M.GcsSubscribe, 21, subscribe(21, CH_OBJECT_LOCATIONS, object_id))
        check(status >= 0, 'object subscribe: status %d' % status)
        op = object_add_location(object_id, node_id, 4096, (4096, 17, 0))
        status, _ = c.call(M.GcsRequest, 22, request(22, op))
        check(status >= 0, 'object add location: status %d' % status)

        def copy_published():
            for _, ch, key, data in c.items:
                if ch != CH_OBJECT_LOCATIONS or key != object_id or not data:
                    continue
                obj = parse_record(data).Object()
                if obj is not None and obj.LocationsLength() == 1:
                    return obj
            return None
        while copy_published() is None:
            c.pump()
        obj = copy_published()
        check(bytes(obj.Id().Bytes()) == object_id, 'published object: wrong ID')
        check(bytes(obj.Locations(0).Bytes()) == node_id, 'published object: wrong copy')
        check(obj.SizeBytes() == 4096, 'published object: size %d' % obj.SizeBytes())
        check(obj.PlacesLength() == 1 and obj.Places(0).Offset() == 4096 and
              obj.Places(0).Alloc() == 17, 'published object: wrong place')
        print('ok   object_location_subscription_receives_a_copy')

        # The snapshot of a key ends with a marker, also when empty: a subscription to an
        # object nobody has put yet is RESYNC then SNAPSHOT_END; its add arrives as a change.
        def kinds_of(key):
            return [k for k, ch, ky, _ in c.items if ch == CH_OBJECT_LOCATIONS and ky == key]
        check(kinds_of(object_id)[:3] == [KIND_RESYNC, KIND_SNAPSHOT, KIND_SNAPSHOT_END],
              'present object: kinds %r' % kinds_of(object_id))
        missing = os.urandom(20)
        status, _ = c.call(M.GcsSubscribe, 23, subscribe(23, CH_OBJECT_LOCATIONS, missing))
        check(status >= 0, 'missing object subscribe: status %d' % status)
        while len(kinds_of(missing)) < 2:
            c.pump()
        check(kinds_of(missing) == [KIND_RESYNC, KIND_SNAPSHOT_END],
              'missing object: kinds %r' % kinds_of(missing))
        status, _ = c.call(M.GcsRequest, 24, request(24, object_add(missing, owner, node_id, 64)))
        check(status >= 0, 'missing object add: status %d' % status)
        while len(kinds_of(missing)) < 3:
            c.pump()
        check(kinds_of(missing) == [KIND_RESYNC, KIND_SNAPSHOT_END, KIND_DELTA],
              'missing object after its add: kinds %r' % kinds_of(missing))
        print('ok   keyed_snapshot_ends_with_a_marker')
        sock.close()

        sock, status = connect(port, b'not-the-token')
        check(status is None or status < 0, 'a wrong token was accepted (status %r)' % status)
        # The server closes the connection after refusing.
        mtype, _ = recv_frame(sock)
        check(mtype is None, 'the connection stayed open after a wrong token')
        sock.close()
        print('ok   wrong_token_is_refused')
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    shutil.rmtree(TMP, ignore_errors=True)


if __name__ == '__main__':
    main()
