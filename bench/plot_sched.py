#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draw bench/compare sched's plots: read its figures (JSON) on stdin, write PNGs into the
directory named by the one argument, print their paths. Needs matplotlib (Debian's
python3-matplotlib)."""
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = json.load(sys.stdin)
    written = []

    nodes = sorted(int(n) for n in data["decide"])
    rates = [data["decide"][str(n)] / 1e6 for n in nodes]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(nodes, rates, marker="o", label="Ferry's policy, one level")
    ax.axhline(1.0, color="grey", linestyle="--", label="target at 1,000 nodes (1M/s)")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("nodes under the level")
    ax.set_ylabel("decisions per second (millions)")
    ax.set_title("Placement decisions vs cluster size (simulator)")
    ax.legend(loc="lower left")
    fig.tight_layout()
    path = out / "sched-decisions.png"
    fig.savefig(path, dpi=110)
    written.append(str(path))

    sizes = sorted({int(k.split(":")[0]) for k in data["latency"]})
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for mode, label in (("on", "locality on"), ("off", "locality off")):
        ax.plot([s / 1e6 for s in sizes], [data["latency"][f"{s}:{mode}"] for s in sizes],
                marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("task input size (MB)")
    ax.set_ylabel("mean task latency (ms, simulated)")
    ax.set_title("1 ms tasks on 100 nodes, inputs on random nodes, 10 Gb/s")
    ax.legend()
    fig.tight_layout()
    path = out / "sched-locality.png"
    fig.savefig(path, dpi=110)
    written.append(str(path))
    print(" ".join(written))


if __name__ == "__main__":
    main()
