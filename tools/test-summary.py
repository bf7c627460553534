#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sum the results of meson test runs into one closing line.

Reads the meson test logs (testlog*.json) given on the command line. ftest binaries print their own
"N passed, N failed, N skipped" line: those counts are used, so the total counts test cases, not
binaries. Any other test counts as one case by meson's verdict. A binary that crashed or timed
out before printing its line counts as one failure.
"""
import json
import re
import sys
from pathlib import Path

LINE = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$", re.M)


def main(logs):
    passed = failed = skipped = 0
    for d in logs:
        log = Path(d)
        if not log.exists():
            print(f"{d}: no test log (build or test step did not run)")
            failed += 1
            continue
        p = f = s = 0
        for raw in log.read_text().splitlines():
            t = json.loads(raw)
            m = LINE.findall(t.get("stdout") or "")
            verdict = t.get("result")
            if m and verdict in ("OK", "FAIL", "SKIP"):
                a, b, c = map(int, m[-1])
                p, f, s = p + a, f + b, s + c
                if verdict == "FAIL" and b == 0:
                    f += 1  # failed outside the tests (e.g. sanitizer at exit)
            elif verdict == "OK":
                p += 1
            elif verdict == "SKIP":
                s += 1
            else:
                f += 1
        print(f"{d}: {p} passed, {f} failed, {s} skipped")
        passed, failed, skipped = passed + p, failed + f, skipped + s
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
