#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`bench/compare transport --hosts A,B` as a user runs it between two hosts over ssh.

Two hosts on one machine: two network namespaces joined by a veth pair, each with its own sshd
and its own boot id (a bind mount over /proc/sys/kernel/random/boot_id), so that Ferry's two
nodes see two hosts and pull over TCP, never shm. From inside host A, the one command starts
ferry-bench's server on A and client on B over ssh with a key made here, iperf3 beside them
(ucx_perftest and perftest where installed, else their reasons). Checked: the RESULT line (the
transport, Ferry's figures and iperf3's), the table's rows and ratios, that nothing of the run is
left on either host (processes, the token's directory), and that a missing ferry-bench on the
hosts and a host nobody answers on fail with their reasons. Needs root, iproute2 and
openssh-server (./dev's test packages); skips with the reason otherwise.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from itest import fail, skip  # noqa: E402

compare, build = os.environ.get("FERRY_COMPARE"), os.environ.get("FERRY_BUILD")
SSHD = "/usr/sbin/sshd"


if not compare or not build:
    skip("FERRY_COMPARE / FERRY_BUILD not set")
if os.geteuid() != 0:
    skip("needs root (network namespaces)")
for tool in ("ip", "ssh", "ssh-keygen"):
    if not shutil.which(tool):
        skip(f"{tool} not installed (iproute2, openssh-client)")
if not Path(SSHD).exists():
    skip("sshd not installed (openssh-server)")

tag = f"fb{os.getpid() % 100000}"
ns = [f"ferrytest-{tag}-a", f"ferrytest-{tag}-b"]
veth = [f"{tag}a", f"{tag}b"]
net = 10 + os.getpid() % 200
ip = [f"10.79.{net}.1", f"10.79.{net}.2"]
sshds = []


def sh(*cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        fail(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def cleanup():
    for p in sshds:
        p.kill()
        p.wait()
    for n in ns:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def ferry_bench_procs(token_dir):
    """ferry-bench processes of this run still alive (their command line names its token)."""
    out = subprocess.run(["pgrep", "-af", "ferry-bench transport"], capture_output=True,
                         text=True).stdout
    return [l for l in out.splitlines() if token_dir in l]


def main(tmp):
    tmp = Path(tmp)
    for n in ns:
        sh("ip", "netns", "add", n)
    sh("ip", "link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
    for i in range(2):
        sh("ip", "link", "set", veth[i], "netns", ns[i])
        sh("ip", "-n", ns[i], "addr", "add", f"{ip[i]}/24", "dev", veth[i])
        sh("ip", "-n", ns[i], "link", "set", veth[i], "up")
        sh("ip", "-n", ns[i], "link", "set", "lo", "up")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "id"))
    shutil.copy(tmp / "id.pub", tmp / "authorized_keys")
    for i in range(2):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / f"host{i}"))
        (tmp / f"boot{i}").write_text(f"5e1f{i}000-0000-4000-8000-{os.getpid():012d}\n")
        (tmp / f"sshd{i}.conf").write_text(
            f"ListenAddress {ip[i]}\nPort 22\nHostKey {tmp}/host{i}\nPidFile {tmp}/sshd{i}.pid\n"
            f"AuthorizedKeysFile {tmp}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nPrintMotd no\n")
        log = open(tmp / f"sshd{i}.log", "w")
        sshds.append(subprocess.Popen(
            ["ip", "netns", "exec", ns[i], "sh", "-c",
             'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"',
             str(tmp / f"boot{i}"), SSHD, "-D", "-e", "-f", str(tmp / f"sshd{i}.conf")],
            stdout=log, stderr=log))
    ssh_opts = (f"-i {tmp}/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                "-o LogLevel=ERROR")
    # Both sshds answer before the run (they take a moment to listen).
    for i in range(2):
        for _ in range(50):
            p = subprocess.run(["ip", "netns", "exec", ns[0], "ssh", *ssh_opts.split(), ip[i],
                                "cat /proc/sys/kernel/random/boot_id"],
                               capture_output=True, text=True)
            if p.returncode == 0:
                break
            time.sleep(0.2)
        if p.returncode != 0 or p.stdout.strip() != (tmp / f"boot{i}").read_text().strip():
            fail(f"ssh to {ip[i]}: exit {p.returncode} {p.stdout!r} {p.stderr!r} "
                 f"(sshd log: {(tmp / f'sshd{i}.log').read_text()[-500:]!r})")

    def run(*extra, timeout=600):
        cmd = ["ip", "netns", "exec", ns[0], sys.executable, compare, "transport", "--build",
               build, f"--ssh-opts={ssh_opts}", "--min-time", "0.05", *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        print(f"$ {' '.join(cmd[4:])}\n{p.stdout[-3000:]}{p.stderr[-1500:]}")
        return p

    token_dir = f"/tmp/ferry-bench-test-{tag}"
    out = tmp / "hosts.json"
    p = run("--hosts", f"{ip[0]},{ip[1]}", "-s", "8,1048576", "--remote-dir", token_dir,
            "--json", str(out))
    if p.returncode != 0:
        fail(f"bench/compare --hosts exited {p.returncode}")
    result = [l for l in p.stdout.splitlines() if l.startswith("RESULT transport ")]
    if not result:
        fail("no RESULT line")
    fields = dict(kv.split("=", 1) for kv in result[0].split()[2:])
    if fields.get("hosts") != f"{ip[0]},{ip[1]}" or fields.get("transport") != "tcp":
        fail(f"RESULT names {fields.get('hosts')} over {fields.get('transport')}, "
             "not the two hosts over tcp (shm would mean one host)")
    if fields.get("largest_B") != "1048576" or fields.get("tcp_64MiB_GBps") != "nan":
        fail(f"RESULT: largest_B={fields.get('largest_B')}, tcp_64MiB_GBps="
             f"{fields.get('tcp_64MiB_GBps')} (no 64 MiB objects were run: nan)")
    for key in ("pull_largest_GBps", "tcp_small_p50_us", "iperf3_GBps"):
        try:
            v = float(fields.get(key, "nan"))
        except ValueError:
            v = float("nan")
        if not v > 0:
            fail(f"RESULT {key}={fields.get(key)}: not a figure")
    data = json.loads(out.read_text())
    rows = {r["measure"]: r for r in data["rows"]}
    row = rows.get("tcp pull 1048576 B")
    if not row or row["peer"] != "iperf3 1 stream" or not row["ratio"]:
        fail(f"the 1 MiB row beside iperf3: {row}")
    if not rows.get("tcp pull 8 B, 8 in flight", {}).get("ferry"):
        fail("no 8 B row with 8 in flight")
    lat = rows.get("tcp pull 8 B p50")
    if not lat or (lat["peer_value"] is None and not lat["missing"]):
        fail(f"the 8 B latency row has neither a peer figure nor its reason: {lat}")
    if not data["raw"]["remote"] or "p999_us" not in next(iter(data["raw"]["remote"].values())):
        fail("the raw results lack the latency quantiles (for bench/report's CDFs)")
    left = ferry_bench_procs(token_dir)
    for i in range(2):
        q = subprocess.run(["ip", "netns", "exec", ns[0], "ssh", *ssh_opts.split(), ip[i],
                            f"test -e {token_dir} && echo left"], capture_output=True, text=True)
        if "left" in q.stdout:
            fail(f"{token_dir} left on {ip[i]}")
    if left:
        fail(f"ferry-bench still running after the run: {left}")

    # bench/report with the same two hosts: the transport section and the two-host plots.
    report = Path(compare).with_name("report")
    rdir = tmp / "report"
    cmd = ["ip", "netns", "exec", ns[0], sys.executable, str(report), "--suites", "transport",
           "--quick", "--out", str(rdir), "--build", build, "--hosts", f"{ip[0]},{ip[1]}",
           f"--ssh-opts={ssh_opts}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    print(p.stdout[-1500:], p.stderr[-1500:])
    if p.returncode != 0:
        fail(f"bench/report --hosts exited {p.returncode}")
    md = (rdir / "report.md").read_text()
    if "RESULT transport hosts=" not in md:
        fail("the report lacks the two-host RESULT line")
    for png in ("hosts-bandwidth.png", "hosts-latency.png"):
        if f"]({png})" not in md:
            fail(f"the report does not show {png} (python3-matplotlib missing?)")
        if (rdir / png).read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            fail(f"{png} is not a PNG")
    if os.environ.get("FERRY_KEEP_REPORT"):
        shutil.copytree(rdir, os.environ["FERRY_KEEP_REPORT"], dirs_exist_ok=True)

    # A build that is not on the hosts, and a host nobody answers on: said, not hung.
    p = run("--hosts", f"{ip[0]},{ip[1]}", "--remote-build", "/nonexistent", timeout=120)
    if p.returncode == 0 or "no /nonexistent/bench/ferry-bench on" not in p.stdout + p.stderr:
        fail(f"a missing ferry-bench: exit {p.returncode}")
    t0 = time.monotonic()
    p = run("--hosts", f"{ip[0]},10.79.{net}.9", "-s", "8", timeout=120)
    if p.returncode == 0 or "10.79." not in p.stderr:
        fail(f"a host that does not answer: exit {p.returncode}")
    if ferry_bench_procs("/tmp/ferry-bench-"):
        fail(f"ferry-bench left running: {ferry_bench_procs('/tmp/ferry-bench-')}")
    print(f"ok: two hosts over ssh; a failing host said in {time.monotonic() - t0:.1f} s")


try:
    with tempfile.TemporaryDirectory(prefix="ferry-hosts-") as d:
        main(d)
finally:
    cleanup()
