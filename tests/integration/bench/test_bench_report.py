#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/report as a user runs it: one quick suite into a fresh directory. The report names the
suite's figures and their peers, its RESULT line is there, the suite's JSON has rows with
ratios, the machine file names the commit and the kernel, and each plot the report shows is a
PNG file. A report asked for an unknown suite is refused."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from itest import fail, skip  # noqa: E402

report, build = os.environ.get("FERRY_REPORT"), os.environ.get("FERRY_BUILD")
if not report or not build:
    skip("FERRY_REPORT / FERRY_BUILD not set")


with tempfile.TemporaryDirectory(prefix="ferry-report-") as tmp:
    out = Path(tmp) / "r"
    p = subprocess.run([sys.executable, report, "--suites", "plasma", "--quick", "--out", str(out),
                        "--build", build], capture_output=True, text=True, timeout=560)
    print(p.stdout[-2000:], p.stderr[-2000:])
    if p.returncode != 0:
        fail(f"bench/report exited {p.returncode}")
    md = (out / "report.md").read_text()
    for want in ("## plasma", "| put 1 GiB (target >= 0.9 x) |", "memcpy 1 GiB", "`RESULT plasma ",
                 "Kernel: `"):
        if want not in md:
            fail(f"report.md lacks {want!r}")
    run = json.loads((out / "plasma.json").read_text())
    ratios = [r for r in run["rows"] if r["ratio"] is not None]
    if len(ratios) < 5 or "put_small_p50_us" not in run["result"]:
        fail(f"plasma.json: {len(ratios)} rows with ratios, result {run.get('result')}")
    info = json.loads((out / "machine.json").read_text())
    if not info.get("commit") or "Linux" not in info.get("kernel", ""):
        fail(f"machine.json: {info}")
    pngs = [l.split("](")[1].rstrip(")") for l in md.splitlines() if l.startswith("![")]
    if not pngs:
        fail("no plot in the report (is python3-matplotlib installed?)")
    for name in pngs:
        if (out / name).read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
            fail(f"{name} is not a PNG")
    bad = subprocess.run([sys.executable, report, "--suites", "nosuch", "--out", str(out)],
                         capture_output=True, text=True)
    if bad.returncode == 0 or "unknown suite nosuch" not in bad.stderr:
        fail(f"an unknown suite: exit {bad.returncode}, {bad.stderr!r}")
print(f"ok: report with {len(pngs)} plots")
