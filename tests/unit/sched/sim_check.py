#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run ferry-sched-sim small and check what its SIM line claims: every task finished, a task
makes at most one trip up and one down the tree, tasks run where their input is, and a burst
fills the cluster."""
import subprocess
import sys

sim = sys.argv[1]


def run(*args):
    out = subprocess.run([sim, *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"{sim} {' '.join(args)} exited {out.returncode}: {out.stderr.strip()}")
    line = next((l for l in out.stdout.splitlines() if l.startswith("SIM ")), None)
    if not line:
        sys.exit(f"no SIM line in: {out.stdout!r}")
    return {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}


failures = []
def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


# Two levels over 2,000 nodes, inputs of 100 MB on random nodes, 80% load.
r = run("--nodes", "2000", "--fanout", "100", "--tasks", "40000", "--duration-ms", "100")
check(r["finished"] == 40000, f"every task finished ({r['finished']:.0f})")
check(r["max_hops"] <= 3, f"at most one trip up and one down ({r['max_hops']:.0f} levels)")
check(r["local_fraction"] >= 0.95, f"tasks ran on their input's node ({r['local_fraction']:.3f})")
# --groups: a burst from one node of group 0 out of 20 must spread over the other groups through
# the global level (up, then down to another group: 3 levels), never beyond.
r = run("--nodes", "2000", "--groups", "20", "--tasks", "40000", "--burst", "--duration-ms", "100")
check(r["finished"] == 40000 and r["fanout"] == 100, f"groups: every task finished ({r['finished']:.0f})")
check(r["max_hops"] == 3, f"groups: a task crosses at most 3 levels ({r['max_hops']:.0f})")
check(r["hops_mean"] > 2.5, f"groups: most of the burst left its group ({r['hops_mean']:.2f})")
# One level, the burst of issue 24 (80,000 tasks from one node on 360 nodes of 8 slots).
r = run("--nodes", "360", "--tasks", "80000", "--burst", "--duration-ms", "1000")
check(r["finished"] == 80000, f"every burst task finished ({r['finished']:.0f})")
check(0 < r["busy_95_ms"] <= 1000, f"95% of the slots busy within 1 s ({r['busy_95_ms']:.3f} ms)")
# The policy alone.
r = run("--decide-only", "--nodes", "1000", "--tasks", "20000")
check(r["decisions"] == 20000, "decide-only made every decision")
# Locality against a scheduler blind to data: 1 ms tasks with 100 MB inputs at light load. On,
# the tasks run by their inputs and wait for nothing; off, nearly all fetch 100 MB at 10 Gb/s
# (80 ms each).
light = ["--nodes", "100", "--tasks", "2000", "--duration-ms", "1", "--load-pct", "0.1",
         "--input-bytes", "100000000"]
on, off = run(*light), run(*light, "--no-locality")
check(on["fetched_fraction"] <= 0.05, f"locality on: few tasks fetch ({on['fetched_fraction']})")
check(off["fetched_fraction"] >= 0.9, f"locality off: most tasks fetch ({off['fetched_fraction']})")
check(off["lat_ms_mean"] >= 10 * on["lat_ms_mean"],
      f"locality on is >= 10x faster ({on['lat_ms_mean']:.2f} ms vs {off['lat_ms_mean']:.2f})")
check(off["lat_ms_p50"] >= 80, f"a 100 MB fetch at 10 Gb/s takes >= 80 ms ({off['lat_ms_p50']})")
# Bad values are refused with a message naming the flag, never run (or spin).
for args in (["--report-ms", "0"], ["--hop-us", "-1"], ["--nodes", "abc"], ["--fanout", "-3"],
             ["--load-pct", "0"], ["--load-pct", "101"], ["--gbps", "0"], ["--groups", "0"], ["stray"]):
    out = subprocess.run([sim, *args, "--tasks", "10"], capture_output=True, text=True,
                         timeout=30)
    check(out.returncode == 2 and "ferry-sched-sim:" in out.stderr,
          f"{' '.join(args)} is refused (exit {out.returncode}: {out.stderr.strip()[:60]})")
sys.exit(1 if failures else 0)
