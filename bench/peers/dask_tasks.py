#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dask distributed's task overheads, a peer of bench/compare runtime (issue 23).

    bench/peers/dask_tasks.py [--workers 2] [--sync-n 1000] [--async-n 10000] [--warmup 50]

A LocalCluster of worker processes (one thread each) and a no-op task, the shapes of Ferry's
rows: tasks sync (submit one, wait for its result, again: p50 and p99 in us) and tasks async
(submit N one call at a time, then gather them all: tasks/s). The same N through client.map,
Dask's batched submit, is printed too: Ferry's async row submits one call at a time, so the
per-call figure is the one compared, and the batched one shows what Dask gains by batching.
Prints one JSON object on stdout. Exit 77 (with the reason in the JSON and on stderr) when
Debian's python3-distributed is not installed.
"""
import argparse
import json
import logging
import os
import sys
import time

SKIP = 77
# Debian's python3-distributed is installed for Debian's interpreter; a python3 found first on
# PATH (pyenv, a venv) does not see it, so the script runs itself again under this one.
DEBIAN_PYTHON = "/usr/bin/python3"


def noop(*_):
    return None


def percentile(sorted_ns, q):
    """The sample at q of the way through, in us (bench/bench_util.h's rule)."""
    return sorted_ns[int(q * (len(sorted_ns) - 1))] / 1e3


def run(args, Client, LocalCluster):
    out = {"workers": args.workers, "threads_per_worker": 1, "sync_n": args.sync_n,
           "async_n": args.async_n}
    t0 = time.monotonic()
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(args.workers, timeout=120)
        out["cluster_start_s"] = time.monotonic() - t0
        for _ in range(args.warmup):
            client.submit(noop, pure=False).result()

        lat = []
        for _ in range(args.sync_n):
            t = time.perf_counter_ns()
            client.submit(noop, pure=False).result()
            lat.append(time.perf_counter_ns() - t)
        lat.sort()
        out["tasks_sync_p50_us"] = percentile(lat, 0.50)
        out["tasks_sync_p99_us"] = percentile(lat, 0.99)

        t = time.perf_counter()
        futures = [client.submit(noop, pure=False) for _ in range(args.async_n)]
        client.gather(futures)
        out["tasks_async_per_s"] = args.async_n / (time.perf_counter() - t)
        del futures

        t = time.perf_counter()
        futures = client.map(noop, range(args.async_n), pure=False)
        client.gather(futures)
        out["tasks_async_map_per_s"] = args.async_n / (time.perf_counter() - t)
        del futures
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sync-n", type=int, default=1000)
    ap.add_argument("--async-n", type=int, default=10000)
    ap.add_argument("--warmup", type=int, default=50)
    args = ap.parse_args()
    if min(args.workers, args.sync_n, args.async_n) < 1 or args.warmup < 0:
        ap.error("counts must be positive")
    try:
        import distributed
        from distributed import Client, LocalCluster
    except ImportError as e:
        if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and \
                os.access(DEBIAN_PYTHON, os.X_OK):
            os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
        why = f"python3-distributed is not installed (apt-get install python3-distributed): {e}"
        print(json.dumps({"skip": why}))
        print(f"SKIP: {why}", file=sys.stderr)
        sys.exit(SKIP)
    out = {"dask_version": distributed.__version__}
    out.update(run(args, Client, LocalCluster))
    print(json.dumps(out))


if __name__ == "__main__":  # LocalCluster's workers re-import this file: run once only
    main()
