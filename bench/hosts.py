# SPDX-License-Identifier: Apache-2.0
"""Two hosts, one command: `bench/compare transport --hosts A,B`.

Host A holds the objects (ferry-bench transport --server), host B pulls them (--client); both
are started from wherever bench/compare runs, over ssh or, under Slurm, with srun. The token
is made here and copied to both. Beside Ferry, on the same two hosts: perftest's ib_read_bw and
ib_read_lat on the RDMA device (-d/-x, or the one device A has), iperf3 (one TCP stream) and
ucx_perftest over TCP, each where it is installed. A peer that is missing or fails gives its
reason instead of a figure; nothing is made up.

Every remote command runs under a shell that kills it when its ssh/srun's standard input
closes (this script's end of it), so that nothing is left running on either host when this
script ends, is interrupted, or loses the connection.
"""
import json
import re
import secrets
import select
import shlex
import socket
import subprocess
import time

from peer_output import PeerError, iperf3_gbps, ucx_row

MiB = 1 << 20


class Launcher:
    """Runs commands on a host: ssh HOST, or srun on node HOST of the allocation."""

    def __init__(self, kind, ssh_opts=""):
        self.kind = kind
        self.ssh_opts = shlex.split(ssh_opts or "")

    def argv(self, host, script):
        """The local command that runs shell @script on @host."""
        if self.kind == "ssh":
            return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", *self.ssh_opts,
                    host, "sh -c " + shlex.quote(script)]
        # --overlap: the steps share the allocation's CPUs with each other and with a driver
        # already running in it (Slurm 20.11+).
        return ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--overlap", "--quiet",
                "sh", "-c", script]

    def run(self, host, cmd, stdin=None, timeout=120):
        """@cmd (a list) on @host, to its end: its stdout, or PeerError with its error."""
        try:
            p = subprocess.run(self.argv(host, shlex.join(cmd)), input=stdin,
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise PeerError(f"{cmd[0]} on {host} did not end in {timeout} s")
        except OSError as e:
            raise PeerError(f"cannot run {self.kind}: {e}")
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()[-2:]
            raise PeerError(f"{shlex.join(cmd)[:60]} on {host} exited {p.returncode}: "
                          f"{' / '.join(tail) or 'no output'}")
        return p.stdout

    def start(self, host, cmd):
        """@cmd on @host in the background, stopped when stop() closes its stdin."""
        # (A background list's stdin is /dev/null unless redirected: hence fd 3.)
        script = (f"exec 3<&0; {shlex.join(cmd)} </dev/null & p=$!; "
                  "{ cat <&3 >/dev/null; kill -TERM $p 2>/dev/null; } & "
                  "wait $p; r=$?; exit $r")
        return subprocess.Popen(self.argv(host, script), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc, timeout=15):
    """Close @proc's stdin (the remote side kills its command), wait, kill if it must."""
    if proc is None:
        return
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_line(proc, pattern, timeout):
    """The first stdout line of @proc matching @pattern (a regex), or PeerError."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line.rstrip())
            m = re.search(pattern, line)
            if m:
                return m
        elif proc.poll() is not None:
            break
    err = ""
    try:
        proc.wait(timeout=5)  # a closed stdout: it is ending
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is not None:
        err = (proc.stderr.read() or "").strip().splitlines()[-2:]
        err = f"; it exited {proc.returncode}: {' / '.join(err) or 'no output'}"
    else:
        err = f"; nothing in {timeout} s" if time.monotonic() >= deadline else "; its output closed"
    raise PeerError(f"no '{pattern}' from it{err}" + (f" (said: {seen[-1]})" if seen else ""))


def address(host):
    """@host's address as this machine resolves it (the cluster's name for it)."""
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]
    except OSError as e:
        raise PeerError(f"cannot resolve {host}: {e}")


def pair(value):
    """'X' or 'X,Y': the value for host A and for host B."""
    if value is None:
        return None, None
    parts = str(value).split(",")
    return parts[0], parts[-1]


class Run:
    """One two-host run: what it started, so that cleanup() undoes it all."""

    def __init__(self, args):
        self.args = args
        hosts = args.hosts.split(",")
        if len(hosts) != 2 or not all(hosts):
            raise SystemExit("compare: --hosts takes two hosts, A,B (A holds, B pulls)")
        self.a, self.b = hosts
        self.launch = Launcher(args.launcher, args.ssh_opts)
        self.procs = []
        self.dir = args.remote_dir or f"/tmp/ferry-bench-{secrets.token_hex(4)}"
        self.token = f"{self.dir}/token"
        self.exe = f"{args.remote_build or args.build}/bench/ferry-bench"
        self.made_dir = set()

    def start(self, host, cmd):
        p = self.launch.start(host, cmd)
        self.procs.append(p)
        return p

    def cleanup(self):
        for p in self.procs:
            stop(p)
        for host in self.made_dir:
            try:
                self.launch.run(host, ["rm", "-rf", self.dir], timeout=30)
            except PeerError:
                pass

    def setup(self):
        """ferry-bench on both hosts, and the token in the same place on both."""
        token = secrets.token_hex(32)
        for host in dict.fromkeys((self.a, self.b)):
            try:
                self.launch.run(host, ["test", "-x", self.exe], timeout=60)
            except PeerError as e:
                if "exited 1" in str(e):
                    raise PeerError(f"no {self.exe} on {host}: build Ferry there at the same "
                                  "path, or give --remote-build DIR")
                raise
            script = f"umask 077 && mkdir -p {shlex.quote(self.dir)} && cat > {shlex.quote(self.token)}"
            self.launch.run(host, ["sh", "-c", script], stdin=token, timeout=60)
            self.made_dir.add(host)

    def bench_flags(self, side):
        """perftest-style flags for @side (0: A, 1: B), as ferry-bench takes them."""
        f = []
        dev = pair(self.args.device)[side]
        if dev:
            f += ["-d", dev]
            if self.args.ib_port:
                f += ["-i", str(self.args.ib_port)]
            gid = pair(self.args.gid)[side]
            if gid is not None:
                f += ["-x", gid]
        if self.args.all_sizes:
            f.append("-a")
        elif self.args.size:
            f += ["-s", self.args.size]
        if self.args.transport_kind:
            f += ["--transport", self.args.transport_kind]
        return f

    def ferry(self):
        """Ferry's rows: {benchmark name: result} from B's client, and A's GCS address."""
        srv = [self.exe, "transport", "--server", "--token-file", self.token,
               "--port", str(self.args.gcs_port), *self.bench_flags(0)]
        if not self.args.device:
            srv += ["--ip", self.args.server_ip or address(self.a)]
        p = self.start(self.a, srv)
        m = wait_line(p, r"server ready \(commit (\S+)\): GCS (\S+)", 300)
        gcs = m.group(2)
        cli = [self.exe, "transport", "--client", gcs, "--token-file", self.token,
               "--benchmark_format=json", f"--benchmark_min_time={self.args.min_time}",
               *self.bench_flags(1)]
        out = self.launch.run(self.b, cli, timeout=self.args.client_timeout_s)
        stop(p)
        try:
            data = json.loads(out)
        except ValueError as e:
            raise PeerError(f"ferry-bench's JSON from {self.b} is unreadable ({e})")
        return {b["name"]: b for b in data["benchmarks"] if b.get("run_type") != "aggregate"}, \
            gcs.rsplit(":", 1)[0].strip("[]")

    def peer(self, cmd_a, cmd_b, parse=lambda out: out, tries=20):
        """A peer's server on A and its client on B, retried until the server listens (a
        client that could not connect may still exit 0: iperf3 -J does): parse(its stdout)."""
        p = self.start(self.a, cmd_a)
        try:
            last = None
            for _ in range(tries):
                try:
                    return parse(self.launch.run(self.b, cmd_b, timeout=120))
                except PeerError as e:
                    last = e
                    if p.poll() is not None:
                        break
                    time.sleep(0.5)
            raise last
        finally:
            stop(p)

    def has(self, tool):
        for host in dict.fromkeys((self.a, self.b)):
            try:
                self.launch.run(host, ["sh", "-c", f"command -v {tool}"], timeout=60)
            except PeerError:
                raise PeerError(f"{tool} not installed on {host}")

    def rdma_device(self, side):
        """The device perftest uses on @side: -d, or the only one that host has."""
        dev = pair(self.args.device)[side]
        if dev:
            return dev
        host = (self.a, self.b)[side]
        out = self.launch.run(host, ["sh", "-c", "ls /sys/class/infiniband 2>/dev/null || true"])
        devs = out.split()
        if len(devs) != 1:
            raise PeerError(f"{host} has {len(devs) or 'no'} RDMA devices"
                          + (f" ({', '.join(devs)}): give -d" if devs else ""))
        return devs[0]

    def perftest_flags(self, side):
        f = ["-d", self.rdma_device(side)]
        if self.args.ib_port:
            f += ["-i", str(self.args.ib_port)]
        gid = pair(self.args.gid)[side]
        if gid is not None:
            f += ["-x", gid]
        return f

    def ib_read_bw(self, ip, sizes):
        """{size: MiB/s} by ib_read_bw: -a for sizes up to 8 MiB, -s for each larger one."""
        self.has("ib_read_bw")
        got = {}
        runs = [["-a"]] if any(s <= 8 * MiB for s in sizes) else []
        runs += [["-s", str(s)] for s in sizes if s > 8 * MiB]
        for i, extra in enumerate(runs):
            port = str(self.args.perftest_port + i)
            fa, fb = self.perftest_flags(0), self.perftest_flags(1)
            out = self.peer(["ib_read_bw", *fa, *extra, "-F", "-p", port],
                            ["ib_read_bw", *fb, *extra, "-F", "-p", port, ip])
            for line in out.splitlines():
                cols = line.split()
                if len(cols) >= 4 and cols[0].isdigit() and cols[1].isdigit():
                    got[int(cols[0])] = float(cols[3])
        if not got:
            raise PeerError("ib_read_bw printed no result")
        return got

    def ib_read_lat(self, ip, size):
        self.has("ib_read_lat")
        port = str(self.args.perftest_port + 50)
        out = self.peer(["ib_read_lat", *self.perftest_flags(0), "-s", str(size), "-n", "1000",
                         "-F", "-p", port],
                        ["ib_read_lat", *self.perftest_flags(1), "-s", str(size), "-n", "1000",
                         "-F", "-p", port, ip])
        for line in out.splitlines():
            cols = line.split()
            if len(cols) >= 5 and cols[0] == str(size):
                return float(cols[4])  # t_typical[usec]: the median
        raise PeerError("ib_read_lat printed no result")

    def iperf3(self, ip):
        self.has("iperf3")
        port = str(self.args.perftest_port + 60)
        return self.peer(["iperf3", "-s", "-1", "-p", port],
                         ["iperf3", "-c", ip, "-p", port, "-t", "3", "-J"], iperf3_gbps)


    def ucx_tcp_rtt(self, ip):
        self.has("ucx_perftest")
        port = str(self.args.perftest_port + 70)
        out = self.peer(["env", "UCX_TLS=tcp", "ucx_perftest", "-p", port],
                        ["env", "UCX_TLS=tcp", "ucx_perftest", ip, "-p", port, "-t", "tag_lat",
                         "-s", "8", "-n", "20000", "-w", "2000", "-f", "-v"])
        return 2 * ucx_row(out, "tag_lat")["50.0_percentile_lat"]


def attempt(fn, *a):
    """fn(*a), or the PeerError that says why not."""
    try:
        return fn(*a)
    except PeerError as e:
        return e
    except (OSError, subprocess.SubprocessError, KeyError, ValueError) as e:
        return PeerError(str(e))


def two_hosts(args):
    """The rows, the RESULT figures and the raw results of one two-host run.

    rows: (measure, Ferry figure, peer name, peer figure, unit), a figure being a number or
    a PeerError. Ferry's own run failing is fatal (SystemExit naming why); a peer failing is not.
    """
    run = Run(args)
    try:
        try:
            run.setup()
            res, server_ip = run.ferry()
        except PeerError as e:
            raise SystemExit(f"compare: two hosts {run.a},{run.b}: {e}")
        errors = [f"{n}: {b.get('error_message')}" for n, b in res.items() if b.get("error_occurred")]
        if errors:
            raise SystemExit(f"compare: two hosts: ferry-bench failed: {errors[0]}")
        labels = {b.get("label", "").split()[0] for b in res.values() if b.get("label")}
        transport = "/".join(sorted(labels)) or "unknown"
        sizes = sorted({int(n.split("/")[1]) for n in res})
        bw = attempt(run.ib_read_bw, server_ip, sizes)
        lat = attempt(run.ib_read_lat, server_ip, min(sizes))
        ip3 = attempt(run.iperf3, server_ip)
        ucx = attempt(run.ucx_tcp_rtt, server_ip)
    finally:
        run.cleanup()

    def fig(size, inflight, key):
        b = res.get(f"BM_transport_remote_pull/{size}/{inflight}/manual_time")
        if b is None:
            return PeerError(f"no {size} B / {inflight} row in the run")
        if key == "MBps":
            return b.get("bytes_per_second", 0.0) / 1e6
        return b.get(key, 0.0)

    def bw_at(size):
        if isinstance(bw, PeerError):
            return bw
        if size not in bw:
            return PeerError(f"ib_read_bw ran no {size} B messages")
        return bw[size] * MiB / 1e6

    rdma, tcp = transport == "rdma", transport == "tcp"
    ip3_mb = ip3 * 1e3 if isinstance(ip3, float) else ip3
    rows = []
    for size in sizes:
        peer = (f"ib_read_bw {size} B", bw_at(size)) if rdma else ("iperf3 1 stream", ip3_mb)
        rows.append((f"{transport} pull {size} B", fig(size, 1, "MBps"), *peer, "MB/s"))
        rows.append((f"{transport} pull {size} B, 8 in flight", fig(size, 8, "MBps"), *peer,
                     "MB/s"))
    small, big = sizes[0], sizes[-1]
    peer = (f"ib_read_lat {small} B median", lat) if rdma else ("ucx_perftest tcp round trip", ucx)
    rows.append((f"{transport} pull {small} B p50", fig(small, 1, "p50_us"), *peer, "us"))
    rows.append((f"{transport} pull {small} B p99", fig(small, 1, "p99_us"), *peer, "us"))

    nan = float("nan")

    def num(v):
        return v if isinstance(v, float) else nan

    # The local suite's keys where this run has their sizes (64 MiB and 1 MiB bandwidth, 8 B
    # latency), nan where not; the largest and smallest sizes' figures whatever they are.
    figures = {"hosts": f"{run.a},{run.b}", "transport": transport,
               "largest_B": str(big), "smallest_B": str(small),
               "pull_largest_GBps": num(fig(big, 1, "MBps")) / 1e3,
               "pull_smallest_p50_us": num(fig(small, 1, "p50_us")),
               "tcp_64MiB_GBps": num(fig(64 * MiB, 1, "MBps")) / 1e3 if tcp else nan,
               "iperf3_GBps": num(ip3),
               "rdma_1MiB_MBps": num(fig(MiB, 1, "MBps")) * 1e6 / MiB if rdma else nan,
               "ib_read_bw_MBps": num(bw.get(MiB) if isinstance(bw, dict) else bw),
               "tcp_small_p50_us": num(fig(8, 1, "p50_us")) if tcp else nan,
               "ucx_tcp_rtt_us": num(ucx),
               "rdma_small_p50_us": num(fig(8, 1, "p50_us")) if rdma else nan,
               "ib_read_lat_us": num(lat)}
    raw = {"remote": {n: {k: b.get(k) for k in ("bytes_per_second", "p1_us", "p10_us", "p25_us",
                                                 "p50_us", "p75_us", "p90_us", "p99_us",
                                                 "p999_us", "label")}
                      for n, b in res.items()},
           "remote_transport": transport,
           "remote_ib_read_bw_MiBps": {str(k): v for k, v in bw.items()} if isinstance(bw, dict)
           else None,
           "remote_iperf3_GBps": ip3 if isinstance(ip3, float) else None}
    return rows, figures, raw
