#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ferry-bench's two-host mode with perftest's flags, on a real RDMA device (the soft-RoCE VM):
the server and the client name the device with -d (and the GID with -x) instead of an address,
take their sizes from -s, and pull over RDMA (each row's label). Also refused with their
reasons: a device that is not there, a GID the device does not have, and a client asking for a
size the server does not hold. Skips where no RDMA device exists."""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

exe = os.environ.get("FERRY_BENCH_BIN")
if not exe or not Path(exe).exists():
    print("SKIP: FERRY_BENCH_BIN not set or not built (Google Benchmark missing?)")
    sys.exit(77)
devs = sorted(os.listdir("/sys/class/infiniband")) if Path("/sys/class/infiniband").is_dir() else []
if not devs:
    print("SKIP: no RDMA device (/sys/class/infiniband is empty; ./dev rdma runs the VM)")
    sys.exit(77)
# One VM is one host: rdma_cm routes 10.77.0.1 from rxe1 through rxe0, so both sides use
# the first device, as the VM's other RDMA benchmarks do.
dev = cdev = devs[0]


def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)


def bench(*args, timeout=600):
    p = subprocess.run([exe, "transport", *args], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, FERRY_BENCH_STORE_MIB="256"))
    print(f"$ ferry-bench transport {' '.join(args)}: exit {p.returncode}\n"
          f"{p.stderr[-1500:]}")
    return p


with tempfile.TemporaryDirectory(prefix="ferry-rdma-bench-") as tmp:
    token = Path(tmp) / "token"
    token.write_text(os.urandom(16).hex())
    token.chmod(0o600)
    for args, why in ((["-d", "nosuch0"], "No such device"),
                      (["-d", dev, "-x", "200"], "No such file or directory")):
        p = bench("--server", "--token-file", str(token), *args)
        if p.returncode != 2 or why not in p.stderr:
            fail(f"{args}: exit {p.returncode}, wanted 2 and '{why}'")
    port = str(17000 + os.getpid() % 1000)
    srv = subprocess.Popen([exe, "transport", "--server", "--token-file", str(token), "-d", dev,
                            "--port", port, "-s", "8,65536"], stdout=subprocess.PIPE,
                           stderr=open(Path(tmp) / "server.log", "w"), text=True,
                           env=dict(os.environ, FERRY_BENCH_STORE_MIB="256"))
    try:
        line = srv.stdout.readline()
        print(line.strip())
        if "server ready" not in line:
            srv.terminate()
            srv.wait()
            fail(f"no ready line from the server: {line!r} "
                 f"{(Path(tmp) / 'server.log').read_text()[-1500:]!r}")
        gcs = line.split(" GCS ")[1].split()[0]
        p = bench("--client", gcs, "--token-file", str(token), "-d", cdev, "-s", "4096")
        if p.returncode != 2 or "holds no 4096 B objects" not in p.stderr:
            fail(f"a size the server does not hold: exit {p.returncode}")
        p = bench("--client", gcs, "--token-file", str(token), "-d", cdev, "-s", "8,65536",
                  "--benchmark_min_time=0.01", "--benchmark_format=json")
        if p.returncode != 0:
            fail(f"the client exited {p.returncode}")
        rows = [b for b in json.loads(p.stdout)["benchmarks"] if b.get("run_type") != "aggregate"]
        names = sorted(b["name"] for b in rows)
        want = sorted(f"BM_transport_remote_pull/{s}/{n}/manual_time" for s in (8, 65536)
                      for n in (1, 8))
        if names != want:
            fail(f"rows {names}, wanted {want}")
        for b in rows:
            if b.get("error_occurred") or not b.get("label", "").startswith("rdma "):
                fail(f"{b['name']}: label {b.get('label')!r}, error {b.get('error_message')}")
            if "p999_us" not in b:
                fail(f"{b['name']} lacks the latency quantiles")
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srv.kill()
            fail("the server did not stop on SIGTERM")
    if srv.returncode != 0:
        fail(f"the server exited {srv.returncode} on SIGTERM")
print(f"ok: -d {dev} and -d {cdev}: rows over rdma, refusals said")
