#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The peers of `bench/compare runtime` still run (issue 23), with small counts so that CI notices
# when one breaks: Dask's script (bench/peers/dask_tasks.py) and StarPU's program
# (ferry-peer-starpu) print their figures as JSON, and ferry-bench's shared-memory round trip
# (BM_limits_shm_rtt) completes and publishes its percentiles. One check per run, named by the
# argument: dask, starpu or shm_rtt. Exit 77 (skip, with the reason printed) when the peer's
# package is missing: python3-distributed; libstarpu-dev when the build was configured.
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def fail(why):
    print("FAIL: " + why)
    sys.exit(1)


def run(cmd, env=None, timeout=240):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                             env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        fail(f"{cmd[0]} did not finish in {timeout} s")
    print(f"$ {' '.join(cmd)} -> {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out


def last_json(out):
    lines = out.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        fail("the last line of stdout is not a JSON object")


def positive(fig, *keys):
    for k in keys:
        if not isinstance(fig.get(k), (int, float)) or not fig[k] > 0:
            fail(f"{k} is {fig.get(k)!r}, not a positive number")


def check_dask():
    script = os.environ.get("FERRY_DASK_SCRIPT")
    if not script:
        skip("run by meson: FERRY_DASK_SCRIPT is not set")
    out = run([sys.executable, script, "--sync-n", "20", "--async-n", "200", "--warmup", "5"])
    if out.returncode == SKIP:
        skip(last_json(out).get("skip", "dask_tasks.py skipped"))
    if out.returncode != 0:
        fail(f"dask_tasks.py exited {out.returncode}")
    fig = last_json(out)
    positive(fig, "tasks_sync_p50_us", "tasks_sync_p99_us", "tasks_async_per_s",
             "tasks_async_map_per_s")
    if fig["tasks_sync_p99_us"] < fig["tasks_sync_p50_us"] or fig["workers"] != 2:
        fail("p99 below p50, or not the 2 workers asked for")
    # A count that is not positive is refused before any cluster starts.
    if run([sys.executable, script, "--async-n", "0"]).returncode != 2:
        fail("--async-n 0 was not refused with exit 2")


def check_starpu():
    exe = os.environ.get("FERRY_STARPU_BIN")
    if not exe:
        skip("ferry-peer-starpu is not built: libstarpu-dev (pkg-config starpu-1.3) was not "
             "found when the build was configured")
    # StarPU's own code is not ours to check: under the sanitizer builds its leaks and its
    # lock-free queues (invisible to TSan) are not reported. Calibration files go to a
    # private STARPU_HOME, removed after.
    with tempfile.TemporaryDirectory(prefix="ferry-starpu-test-") as home:
        env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0",
               "TSAN_OPTIONS": os.environ.get("TSAN_OPTIONS", "") + ":report_bugs=0",
               "STARPU_SILENT": "1", "STARPU_HOME": home}
        check_starpu_run(exe, env)


def check_starpu_run(exe, env):
    out = run([exe, "--tasks", "2000", "--rounds", "3", "--sync-tasks", "50"], env)
    if out.returncode == SKIP:
        skip(out.stdout.strip() or "ferry-peer-starpu skipped")
    if out.returncode != 0:
        fail(f"ferry-peer-starpu exited {out.returncode}")
    fig = last_json(out)
    positive(fig, "tasks_per_s", "workers", "sync_p50_us", "sync_p99_us")
    if fig["tasks"] != 2000 or fig["rounds"] != 3 or fig["sync_tasks"] != 50:
        fail("the counts printed are not the ones asked for")
    if run([exe, "--tasks", "0"], env).returncode != 2:
        fail("--tasks 0 was not refused with exit 2")


def check_shm_rtt():
    exe = os.environ.get("FERRY_BENCH_BIN")
    if not exe or not os.access(exe, os.X_OK):
        skip("ferry-bench is not built (FERRY_BENCH_BIN)")
    out = run([exe, "--benchmark_filter=^BM_limits_shm_rtt$", "--benchmark_min_time=0.05",
               "--benchmark_format=json"], timeout=120)
    if out.returncode != 0:
        fail(f"ferry-bench exited {out.returncode}")
    try:
        rows = [b for b in json.loads(out.stdout)["benchmarks"]
                if b["name"] == "BM_limits_shm_rtt"]
    except (ValueError, KeyError):
        fail("ferry-bench's JSON has no benchmarks")
    if len(rows) != 1 or rows[0].get("error_occurred"):
        fail(f"BM_limits_shm_rtt did not run cleanly: {rows}")
    positive(rows[0], "iterations", "p50_us", "p99_us")
    if not 0 <= rows[0].get("sleeps_pct", -1) <= 100:
        fail("sleeps_pct is not a percentage")


CHECKS = {"dask": check_dask, "starpu": check_starpu, "shm_rtt": check_shm_rtt}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        fail(f"usage: {sys.argv[0]} {'|'.join(CHECKS)}")
    CHECKS[sys.argv[1]]()
    print("PASS")
