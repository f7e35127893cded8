"""The server's memory under hostile Claims: starts a release opreg-server
(embedded PostgreSQL), sends rounds of concurrent Claims at the parameter limit
and of 350,000 fields, and prints the answers and VmRSS / VmHWM after each.

    cargo build --release -p opreg-server
    client/python/.venv/bin/python bench/hostile_input.py   # the venv client/python/ci.sh makes
"""
import concurrent.futures as cf
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client/python/src"))
from opreg._gen.v1 import registry_pb2 as pb, registry_pb2_grpc as rpc
from google.protobuf import struct_pb2

def rss(pid):
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return fields["VmRSS"].strip(), fields["VmHWM"].strip()


d = tempfile.mkdtemp()
os.chmod(d, 0o755)  # as root, the embedded PostgreSQL runs as another user
port = 50171
env = dict(os.environ, OPREG_DATA_DIR=f"{d}/pg", OPREG_LISTEN_ADDR=f"127.0.0.1:{port}", OPREG_METRICS_ADDR="127.0.0.1:0")
server = subprocess.Popen(
    [str(REPO / "target/release/opreg-server")], env=env, stdout=open(f"{d}/log", "w"), stderr=subprocess.STDOUT
)
for _ in range(300):
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        break
    except OSError:
        time.sleep(0.1)
time.sleep(1)
print("start", rss(server.pid))
channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)])
stub = rpc.OperationRegistryStub(channel)


def claim(i, params):
    try:
        stub.Claim(pb.ClaimRequest(namespace="hostile", operation_key=f"k{i}-{time.time_ns()}", owner="x", parameters=params), timeout=60)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name

largest = struct_pb2.Struct()
largest.update({f"f{i}": "x" * 50 for i in range(1000)})  # ~59 KB canonical
huge = struct_pb2.Struct()
huge.update({f"field{i}": i for i in range(350_000)})
print("largest encoded", largest.ByteSize(), "huge encoded", huge.ByteSize())
for label, params, n in [("64 x largest allowed", largest, 64), ("64 x largest allowed", largest, 64), ("32 x 350,000 fields", huge, 32)]:
    with cf.ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(lambda i: claim(i, params), range(n)))
    print(label, {a: answers.count(a) for a in set(answers)}, rss(server.pid))
server.terminate()
server.wait()
shutil.rmtree(d, ignore_errors=True)
