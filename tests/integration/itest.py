# SPDX-License-Identifier: Apache-2.0
"""What the Python integration tests share: meson's verdicts (77 is a skip) with the reason."""
import sys


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)
