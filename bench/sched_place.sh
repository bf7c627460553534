#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Place requests per second through one ferry-sched against N simulated nodes (ferry-nodesim:
# real GCS registrations and load reports, 4 CPUs each), from one batching client
# (ferry-sched-bench), beside the policy's decide-only rate at the same size
# (ferry-sched-sim --decide-only) in the same run.
#   bench/sched_place.sh BUILD_DIR [NODES] [REQUESTS] [BATCH]
set -eu
build=${1:?usage: bench/sched_place.sh BUILD_DIR [NODES] [REQUESTS] [BATCH]}
nodes=${2:-1000}
requests=${3:-200000}
batch=${4:-256}
dir=$(mktemp -d)
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/token"

# Start a daemon with its stdout in $dir/$1.out; wait for its "listening on port" line.
start() {
	name=$1
	shift
	"$@" >"$dir/$name.out" 2>"$dir/$name.log" &
	pids="$pids $!"
	i=0
	until grep -q "listening on port" "$dir/$name.out" 2>/dev/null; do
		i=$((i + 1))
		[ $i -lt 200 ] || { echo "$name did not start:"; cat "$dir/$name.log"; exit 1; }
		sleep 0.05
	done
	sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$dir/$name.out"
}

gcs_port=$(start gcs "$build/ferry-gcs" --port 0 --token-file "$dir/token" --host 127.0.0.1)
gcs=127.0.0.1:$gcs_port
# The simulated nodes stay up (no kills) for the whole run.
"$build/tools/ferry-nodesim" --gcs "$gcs" --token-file "$dir/token" --nodes "$nodes" \
	--settle-s 1 --steady-s 600 --kills 0 >"$dir/nodesim.out" 2>"$dir/nodesim.log" &
pids="$pids $!"
start sched "$build/ferry-sched" --gcs "$gcs" --token-file "$dir/token" --ip 127.0.0.1 \
	--port 0 >/dev/null
"$build/bench/ferry-sched-bench" --gcs "$gcs" --token-file "$dir/token" \
	--requests "$requests" --batch "$batch" --inflight 4 --wait-nodes "$nodes"
"$build/tools/ferry-sched-sim" --decide-only --nodes "$nodes" | sed 's/^/decide-only: /'
