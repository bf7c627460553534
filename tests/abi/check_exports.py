#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""libferry.so must export only public ferry_ names (style.md: FERRY_API + -fvisibility=hidden).

Also checks that every name the shared library exports is declared in include/ferry, so a
FERRY_API on an internal function cannot slip through.
"""
import re
import subprocess
import sys
from pathlib import Path


def main(lib, include_dir):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    headers = "".join(p.read_text() for p in Path(include_dir).rglob("*.h"))
    bad = [n for n in names if not n.startswith("ferry_") or n.startswith("ferry__")]
    undeclared = [n for n in names if n.startswith("ferry_")
                  and not re.search(r"\b" + re.escape(n) + r"\s*\(", headers)]
    print(f"{len(names)} exported symbols")
    for n in bad:
        print(f"not a public ferry_ name: {n}")
    for n in undeclared:
        print(f"exported but not declared in include/ferry: {n}")
    if not names:
        print("no exported symbols at all: the check would be vacuous")
        return 1
    return 1 if bad or undeclared else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
