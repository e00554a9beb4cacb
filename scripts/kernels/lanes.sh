#!/bin/bash
# Usage: scripts/kernels/lanes.sh NICS...   (what `make test` runs after the host's tests)
#
# The kernel matrix and the NIC wires in two lanes side by side, each guest
# a TCG thread on a core of its own: kernels 5.10, 6.12 and 6.1 followed by
# the release's bare hosts and Debian package (lane-kernels.sh), and the
# NICS configurations (nics.sh's arguments); a NIC guest never runs beside
# another (two of them beside the host's tests once flipped CPU-judged
# verdicts). Measured here: 320 + 128 + 237 s of kernels, 150 s of bare
# hosts, 90-200 s of package, and 146-260 s a wire. The
# second lane's output is live; the first lane's follows when both have
# ended (its log is out/lane-kernels.log), then what failed in either.
# Fails if either failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 2
[ $# -gt 0 ] || { echo "usage: $0 KERNEL:MODEL:BACKEND[:LAB]..." >&2; exit 2; }
mkdir -p out
first=out/lane-kernels.log second=out/lane-nics.log

# Each lane in a session of its own, so that an interrupted run stops both
# lanes' guests (run.sh stops its guest on TERM); the script waits with
# wait, which a signal interrupts, so its trap runs at once.
# Both logs exist before tail follows the second: the background job's
# redirection may not have run yet when tail starts.
: >"$first"
: >"$second"
setsid "$here/lane-kernels.sh" >"$first" 2>&1 &
first_pid=$!
setsid "$here/nics.sh" "$@" >"$second" 2>&1 &
second_pid=$!
trap 'kill -TERM -- -"$first_pid" -"$second_pid" 2>/dev/null' EXIT
trap 'echo "lanes: interrupted; stopping the guests" >&2; exit 130' INT TERM HUP

echo "== lane: the NIC wires (kernels 5.10, 6.12 and 6.1, bare hosts and the package beside it, in $first)"
tail -n +1 -f --pid="$second_pid" "$second" &
tail_pid=$!
wait "$second_pid"
second_rc=$?
wait "$tail_pid"
wait "$first_pid"
first_rc=$?

echo
echo "== lane: kernels 5.10, 6.12 and 6.1, bare hosts, the package"
cat "$first"

# Last, so that a shortened log (CI keeps the end) still names what failed.
if [ "$first_rc" != 0 ] || [ "$second_rc" != 0 ]; then
	echo
	echo "== what failed in the lanes"
	# Each lane's last such section: the kernel lane ends with one for all
	# of its parts.
	for lane in "$first" "$second"; do
		awk '/^== what failed/ { n = 0 } { buf[n++] = $0 } END { if (buf[0] ~ /^== what failed/) for (i = 0; i < n; i++) print buf[i] }' "$lane"
	done
	exit 1
fi
