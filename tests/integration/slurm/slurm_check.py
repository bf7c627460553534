#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Ferry under a real Slurm (issue 25): this machine becomes a Slurm cluster of three nodes
(a munged, a slurmctld and three slurmd started here, each slurmd a node of its own name on its
own port), and examples/slurm/ferry.sbatch runs as a user runs it:

1. `sbatch --nodes=3 ferry.sbatch slurm_driver 3`: `ferry start --slurm` starts the head on the
   job's first node and a ferry-node on each other by srun; the driver runs a task on each of
   the three nodes (NODE_AFFINITY); the job ends COMPLETED and no Ferry daemon of the job is
   left.
2. The same with a driver that then sleeps, cancelled with scancel once its tasks ran: the job
   ends CANCELLED, and no Ferry daemon of the job is left.

Skips (exit 77, with the reason) without root or Slurm's and munge's programs (Debian:
slurm-wlm, munge). usage: slurm_check.py FERRY_CLI DRIVER JOB_LIB SBATCH_SCRIPT
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from itest import fail, skip  # noqa: E402

NODES = ("n1", "n2", "n3")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "sinfo",
            "scancel", "srun", "sbcast", "sacct")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def which(name):
    for d in ("/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return shutil.which(name)


class Slurm:
    """munged, slurmctld and one slurmd per node, in @tmp; stopped by stop()."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.env = dict(os.environ, SLURM_CONF=os.path.join(tmp, "slurm.conf"))
        for k in list(self.env):
            if k.startswith("SLURM_") and k != "SLURM_CONF":
                del self.env[k]  # a Slurm job running this test must not leak into ours

    def start(self):
        t = self.tmp
        key = os.path.join(t, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(t, "munge.sock")
        self.spawn([which("munged"), "-F", "--force", "-S", sock, f"--key-file={key}",
                    f"--pid-file={t}/munged.pid", f"--seed-file={t}/munged.seed",
                    f"--log-file={t}/munged.log"], "munged")
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        ctld, slurmd, *node_ports = free_ports(2 + len(NODES))
        lines = [
            "ClusterName=ferrytest", "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld}", f"SlurmdPort={slurmd}", "SlurmUser=root",
            "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={sock}", f"StateSaveLocation={t}/state",
            f"SlurmdSpoolDir={t}/spool-%n", f"SlurmctldPidFile={t}/slurmctld.pid",
            f"SlurmdPidFile={t}/slurmd-%n.pid", f"SlurmctldLogFile={t}/slurmctld.log",
            f"SlurmdLogFile={t}/slurmd-%n.log", "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "MpiDefault=none", "ReturnToService=2",
            "SchedulerType=sched/builtin", "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none", "KillWait=30",
            "MailProg=/bin/true", "InactiveLimit=0", "MinJobAge=600",
        ]
        cpus = os.cpu_count() or 2
        for name, port in zip(NODES, node_ports):
            lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                         f"Port={port} CPUs={cpus} State=UNKNOWN")
        lines.append(f"PartitionName=test Nodes={','.join(NODES)} Default=YES "
                     "MaxTime=INFINITE State=UP")
        os.makedirs(f"{t}/state")
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write("\n".join(lines) + "\n")
        self.spawn([which("slurmctld"), "-D", "-f", self.env["SLURM_CONF"]], "slurmctld")
        for name in NODES:
            os.makedirs(f"{t}/spool-{name}")
            self.spawn([which("slurmd"), "-D", "-N", name, "-f", self.env["SLURM_CONF"]],
                       f"slurmd-{name}")
        for _ in range(300):
            out = self.run(["sinfo", "-h", "-o", "%T %D"], check=False)
            if out.returncode == 0 and out.stdout.split()[:2] == ["idle", str(len(NODES))]:
                return
            time.sleep(0.2)
        self.dump_logs()
        fail(f"Slurm's nodes never went idle: sinfo said {out.stdout.strip()!r}"
             f" {out.stderr.strip()!r}")

    def spawn(self, argv, name):
        log = open(os.path.join(self.tmp, f"{name}.out"), "w")
        self.procs.append((name, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                  env=self.env, cwd=self.tmp)))

    def run(self, argv, check=True, **kw):
        out = subprocess.run([which(argv[0])] + argv[1:], env=self.env, capture_output=True,
                             text=True, timeout=120, **kw)
        if check and out.returncode != 0:
            fail(f"{' '.join(argv)} exited {out.returncode}: {out.stderr.strip()}")
        return out

    def dump_logs(self):
        for f in sorted(os.listdir(self.tmp)):
            if f.endswith(".log") or f.endswith(".out"):
                with open(os.path.join(self.tmp, f), errors="replace") as fh:
                    text = fh.read()[-3000:]
                print(f"--- {f}\n{text}")

    def stop(self):
        for name, p in reversed(self.procs):
            p.terminate()
        for name, p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def job_state(self, job):
        out = self.run(["scontrol", "show", "job", job], check=False)
        for field in out.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return "GONE"

    def wait_job(self, job, timeout=300):
        end = time.time() + timeout
        while time.time() < end:
            state = self.job_state(job)
            if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state
            time.sleep(0.5)
        return self.job_state(job)


def ferry_daemons(job):
    """Pids of Ferry daemons and --block starts whose command line names the job's run dir."""
    run_dir = f"/tmp/ferry-{os.getuid()}-job{job}"
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if run_dir in cmd and "ferry" in cmd:
            pids.append((int(pid), cmd.strip()))
    return pids


def wait_no_daemons(job, timeout=60):
    end = time.time() + timeout
    left = ferry_daemons(job)
    while left and time.time() < end:
        time.sleep(0.5)
        left = ferry_daemons(job)
    return left


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def submit(slurm, tmp, script, driver, args, name):
    out = os.path.join(tmp, f"{name}-%j.out")
    r = slurm.run(["sbatch", "--parsable", f"--nodes={len(NODES)}", f"--output={out}",
                   script, driver, *args], cwd=tmp)
    job = r.stdout.strip().split(";")[0]
    return job, out.replace("%j", job)


def bench_over_srun(slurm, compare, build):
    """`bench/compare transport --hosts n1,n2 --launcher srun`: ferry-bench's server in a step
    on n1, its client in one on n2 (one host here: their pulls go over shm), the RESULT line
    names both, and no step or ferry-bench is left after it."""
    p = subprocess.run([sys.executable, compare, "transport", "--hosts", "n1,n2", "--launcher",
                        "srun", "--server-ip", "127.0.0.1", "-s", "8,65536", "--min-time",
                        "0.01", "--build", build], env=slurm.env, capture_output=True,
                       text=True, timeout=600)
    print(f"bench over srun: exit {p.returncode}\n{p.stdout[-2500:]}{p.stderr[-1500:]}")
    if p.returncode != 0 or "RESULT transport hosts=n1,n2 transport=shm" not in p.stdout:
        fail("bench/compare --launcher srun did not run both ends")
    end = time.time() + 60
    while time.time() < end:
        steps = slurm.run(["squeue", "-h"], check=False).stdout.strip()
        procs = subprocess.run(["pgrep", "-f", "ferry-bench transport"], capture_output=True,
                               text=True).stdout.strip()
        if not steps and not procs:
            return
        time.sleep(0.5)
    fail(f"left after the bench: jobs {steps!r}, ferry-bench pids {procs!r}")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    ferry, driver, job_lib, script = sys.argv[1:]
    if os.getuid() != 0:
        skip("not root: the test starts slurmd and slurmctld")
    missing = [p for p in PROGRAMS if not which(p)]
    if missing:
        skip(f"no {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
    tmp = tempfile.mkdtemp(prefix="ferry-slurm-")
    os.chmod(tmp, 0o755)
    slurm = Slurm(tmp)
    slurm.env.update(FERRY=ferry, FERRY_TEST_JOB=job_lib,
                     FERRY_NODE_OPTS="--memory 64M --num-cpus 1 --ip 127.0.0.1")
    ok = False
    jobs = []
    try:
        slurm.start()
        # 1. A job runs to its end.
        job, out = submit(slurm, tmp, script, driver, [str(len(NODES))], "complete")
        jobs.append(job)
        state = slurm.wait_job(job)
        text = read(out)
        print(f"job {job}: {state}\n{text}")
        if state != "COMPLETED":
            fail(f"job {job} ended {state}, not COMPLETED")
        if f"ran on {len(NODES)} of {len(NODES)} nodes" not in text:
            fail(f"the driver's tasks did not run on all {len(NODES)} nodes")
        left = wait_no_daemons(job)
        if left:
            fail(f"Ferry processes of job {job} left after it ended: {left}")
        # 2. A job cancelled while its driver runs.
        job, out = submit(slurm, tmp, script, driver, [str(len(NODES)), "600"], "cancel")
        jobs.append(job)
        end = time.time() + 300
        while "ran on" not in read(out) and time.time() < end:
            if slurm.job_state(job) not in ("PENDING", "RUNNING", "CONFIGURING"):
                break
            time.sleep(0.5)
        if "ran on" not in read(out):
            fail(f"job {job} never ran its tasks: {slurm.job_state(job)}\n{read(out)}")
        if not ferry_daemons(job):
            fail(f"no Ferry daemon of job {job} found while it runs")
        slurm.run(["scancel", job])
        state = slurm.wait_job(job)
        print(f"job {job}: {state}\n{read(out)}")
        if state != "CANCELLED":
            fail(f"job {job} ended {state}, not CANCELLED")
        left = wait_no_daemons(job)
        if left:
            fail(f"Ferry processes of job {job} left after scancel: {left}")
        # 3. bench/compare's two-host mode with srun as its launcher (plain builds: its
        # ferry-bench runs in the Slurm steps, outside the sanitizers' environment).
        compare, build = os.environ.get("FERRY_COMPARE"), os.environ.get("FERRY_BUILD")
        if compare and build:
            bench_over_srun(slurm, compare, build)
        else:
            print("bench over srun: not run in this build (FERRY_COMPARE unset: sanitizers)")
        ok = True
    finally:
        if not ok:
            slurm.dump_logs()
        slurm.stop()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
            for job in jobs:  # the jobs' run directories (their logs) and token copies
                shutil.rmtree(f"/tmp/ferry-{os.getuid()}-job{job}", ignore_errors=True)
                try:
                    os.unlink(f"/tmp/ferry-{os.getuid()}-job{job}.token")
                except OSError:
                    pass
    print("PASS")


if __name__ == "__main__":
    main()
