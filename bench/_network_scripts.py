"""The processes of ``bench/network.py``, as scripts each party runs with ``python -c``: the
server (HTTP/1.1 upload and download, on one port), the client (set-ups, then one upload and one
download; inside a sandbox with the image's python3) and the inbound proxy of the daemon's own
code with one open port of one sandbox."""

SERVER = r"""
import socket, sys, threading
address, port = sys.argv[1], int(sys.argv[2])
BLOCK = b"x" * (1 << 20)

def schedstat():
    try:  # gVisor has no per-thread schedstat
        return open("/proc/thread-self/schedstat").read().split()[:2]
    except OSError:
        return ["0", "0"]

def serve(conn):
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    pending = b""
    start = schedstat()
    moved = 0
    try:
        while True:
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path = lines[0].split(b" ")[:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            moved += length
            left = length - len(pending[:length])
            pending = pending[length:]
            while left:
                got = conn.recv_into(view[: min(left, len(buf))])
                if not got:
                    return
                left -= got
            if path.startswith(b"/download/"):
                size = int(path.rsplit(b"/", 1)[1])
                moved += size
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                while size:
                    part = min(size, len(BLOCK))
                    conn.sendall(BLOCK[:part])
                    size -= part
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    finally:
        conn.close()
        if moved >= 1 << 20:  # a transfer: its thread's seconds on a CPU and waiting for one
            end = schedstat()
            print(*((int(end[i]) - int(start[i])) / 1e9 for i in (0, 1)), flush=True)

listener = socket.create_server((address, port), backlog=256, reuse_port=True)
print("ready", flush=True)
while True:
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

CLIENT = r"""
import json, os, socket, sys, time
address, port, host, prefix, token = sys.argv[1:6]
port, runs, size = int(port), int(sys.argv[6]), int(sys.argv[7])
wait = sys.argv[8] if len(sys.argv) > 8 else "stdin"  # "none": a sandbox's exec, no go-ahead
extra = "X-Corral-Token: %s\r\n" % token if token != "-" else ""
address = socket.gethostbyname(address)  # once, through the sandbox's resolver for a name

def schedstat():
    try:  # gVisor has no per-thread schedstat
        return open("/proc/thread-self/schedstat").read().split()[:2]
    except OSError:
        return ["0", "0"]

def head(method, path, length=None):
    text = "%s %s%s HTTP/1.1\r\nHost: %s\r\n%s" % (method, prefix, path, host, extra)
    if length is not None:
        text += "Content-Length: %d\r\n" % length
    return (text + "\r\n").encode()

def read_answer(sock, buf):
    view = memoryview(buf)
    got = b""
    while b"\r\n\r\n" not in got:
        data = sock.recv(65536)
        assert data, "closed before an answer"
        got += data
    top, _, rest = got.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 200"), top[:200]
    lines = [l for l in top.split(b"\r\n") if l.lower().startswith(b"content-length")]
    length = int(lines[0].split(b":")[1])
    left = length - len(rest)
    while left:
        n = sock.recv_into(view[: min(left, len(buf))])
        assert n, "closed in an answer"
        left -= n

buf = bytearray(1 << 20)
small = []
for _ in range(runs):
    started = time.perf_counter()
    s = socket.create_connection((address, port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(head("GET", "/small"))
    read_answer(s, buf)
    small.append((time.perf_counter() - started) * 1000)
    s.close()
setup_ms = sorted(small)[len(small) // 2] if small else None
if not size:  # set-ups only (a sandbox's first exec)
    print(json.dumps({"setup_ms": setup_ms}))
    sys.exit(0)
if wait == "stdin":
    print("set-ups done", flush=True)  # the bench reads the proxy's CPU time, then says go
    sys.stdin.readline()
sched = schedstat()
s = socket.create_connection((address, port), timeout=60)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
block = b"y" * (1 << 20)
started = time.perf_counter()
s.sendall(head("POST", "/upload", size))
for _ in range(size >> 20):
    s.sendall(block)
read_answer(s, buf)
up = time.perf_counter() - started
started = time.perf_counter()
s.sendall(head("GET", "/download/%d" % size))
read_answer(s, buf)
down = time.perf_counter() - started
s.close()
sched = [(int(b) - int(a)) / 1e9 for a, b in zip(sched, schedstat())]
mib = size / (1 << 20)
own = os.times()  # over the set-ups and the transfers; the set-ups are a small part
print(json.dumps({"setup_ms": setup_ms, "up": mib / up, "down": mib / down,
                  "client_cpu": own.user + own.system, "client_sched": sched,
                  "seconds": up + down}))
"""

PROXY = r"""
import asyncio, contextlib, sys
sys.path.insert(0, sys.argv[1])
from corral.api.front import front_protocol
from corral.api.inbound import InboundProxy
from corral.service.errors import Forbidden
from corral.service.ports import InboundTarget

class Ports:
    # The service side of the daemon, reduced to one open port of one running sandbox.
    def __init__(self, address, port, token):
        self.address, self.port, self.token = address, port, token
    def check_access(self, sandbox_id, port, token):
        if token != self.token:
            raise Forbidden("wrong token")
    async def resolve_inbound(self, sandbox_id, port):
        return InboundTarget(sandbox_id, self.address, self.port)
    def connection(self, sandbox_id, port):
        return contextlib.nullcontext()

async def main():
    ports = Ports(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    proxy = InboundProxy(ports)  # type: ignore[arg-type]
    front = front_protocol(proxy, asyncio.Protocol, max_head=65536)
    loop = asyncio.get_running_loop()
    await loop.create_server(lambda: front(_loop=loop), "127.0.0.1", int(sys.argv[5]))
    print("ready", flush=True)
    await asyncio.Future()

asyncio.run(main())
"""
