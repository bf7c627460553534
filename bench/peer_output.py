# SPDX-License-Identifier: Apache-2.0
"""What bench/compare and bench/hosts.py read from the peers' output, in one place: the error
a missing figure carries, iperf3's JSON and ucx_perftest's CSV."""
import json


class PeerError(Exception):
    """A peer could not produce its figure; the message is the reason printed in the table."""


def iperf3_gbps(out):
    """iperf3 -J's received bandwidth, GB/s. Its JSON may carry an error with exit 0 (a
    client that could not connect), which is raised as the reason."""
    try:
        data = json.loads(out)
    except ValueError as e:
        raise PeerError(f"iperf3's JSON is unreadable ({e})")
    if data.get("error") or "sum_received" not in data.get("end", {}):
        raise PeerError(f"iperf3: {data.get('error') or 'no sum_received in its JSON'}")
    return data["end"]["sum_received"]["bits_per_second"] / 8e9


def ucx_row(out, test):
    """ucx_perftest -f -v's final CSV row as {column: float}."""
    lines = [l for l in out.strip().splitlines() if "," in l]
    if len(lines) < 2:
        raise PeerError(f"ucx_perftest {test} printed no result")
    return dict(zip(lines[0].split(","), (float(v) for v in lines[-1].split(","))))
