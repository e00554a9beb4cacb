#!/bin/bash
# Usage: scripts/kernels/lanes.sh NICS...   (what `make test` runs after the host's tests)
#
# The kernel matrix and the NIC wires in two lanes side by side, each guest
# a TCG thread on a core of its own: kernels 5.10, 6.12 and 6.1, and the
# NICS configurations (nics.sh's arguments); a NIC guest never runs beside
# another (two of them beside the host's tests once flipped CPU-judged
# verdicts). Measured here: 320 + 128 + 237 s, and 146-260 s a wire. The
# second lane's output is live; the first lane's follows when both have
# ended (its log is out/lane-kernels.log), then what failed in either.
# Fails if either failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: $0 KERNEL:MODEL:BACKEND[:LAB]..." >&2; exit 2; }
mkdir -p out
first=out/lane-kernels.log second=out/lane-nics.log

# Each lane in a session of its own, so that an interrupted run stops both
# lanes' guests (run.sh stops its guest on TERM); the script waits with
# wait, which a signal interrupts, so its trap runs at once.
setsid "$here/matrix.sh" 5.10 6.12 6.1 >"$first" 2>&1 &
first_pid=$!
setsid "$here/nics.sh" "$@" >"$second" 2>&1 &
second_pid=$!
trap 'kill -TERM -- -"$first_pid" -"$second_pid" 2>/dev/null' EXIT
trap 'echo "lanes: interrupted; stopping the guests" >&2; exit 130' INT TERM HUP

echo "== lane: the NIC wires (kernels 5.10, 6.12 and 6.1 beside it, in $first)"
tail -n +1 -f --pid="$second_pid" "$second" &
tail_pid=$!
wait "$second_pid"
second_rc=$?
wait "$tail_pid"
wait "$first_pid"
first_rc=$?

echo
echo "== lane: kernels 5.10, 6.12 and 6.1"
cat "$first"

# Last, so that a shortened log (CI keeps the end) still names what failed.
if [ "$first_rc" != 0 ] || [ "$second_rc" != 0 ]; then
	echo
	echo "== what failed in the lanes"
	sed -s -n '/^== what failed/,$p' "$first" "$second"
	exit 1
fi
