#!/bin/bash
# Usage: scripts/kernels/lane-kernels.sh   (lanes.sh's first lane)
#
# The kernel matrix (5.10, 6.12, 6.1), then the release on bare hosts
# (bare.sh: amd64 on 5.10, 6.1 and 6.12, arm64 on 6.1 and 6.12) and its
# Debian package (deb-check.sh), one after another: each guest is one TCG
# thread, as the NIC lane's is. The release must be built (make release).
# Measured here: 685 s of kernels, 20-40 s a bare host, 90 s for the
# package with its Debian 13 root cached (minutes more to debootstrap it).
# Ends with one "== what failed" section for all of them, and fails if any
# failed.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
log=$(mktemp /tmp/skbtrace-lane.XXXXXX)
trap 'rm -f "$log"' EXIT
what=()

"$here/matrix.sh" 5.10 6.12 6.1 2>&1 | tee "$log"
if [ "${PIPESTATUS[0]}" != 0 ]; then
	what+=("$(sed -n '/^== what failed/,$p' "$log" | tail -n +2)")
	[ -n "${what[-1]}" ] || what[-1]="kernel matrix: failed (above)"
fi

for host in "amd64 5.10" "amd64 6.1" "amd64 6.12" "arm64 6.1" "arm64 6.12"; do
	echo
	echo "== bare host: $host"
	# shellcheck disable=SC2086 # ARCH and VERSION, two words
	"$here/bare.sh" $host 2>&1 | tee "$log"
	if [ "${PIPESTATUS[0]}" != 0 ]; then
		# The guest's verdict on its first failed step and bare.sh's last word.
		what+=("bare $host: $(tail -n1 "$log")
  $(grep -E '^bare: FAIL' "$log" | tail -n1)")
	fi
done

echo
echo "== the Debian package"
"$here/../deb-check.sh" 2>&1 | tee "$log"
if [ "${PIPESTATUS[0]}" != 0 ]; then
	what+=("deb-check:
$(grep -E '^(FAIL|deb-check: )' "$log" | sed 's/^/  /')")
fi

# Last, so that a shortened log (CI keeps the end) still names what failed.
if [ ${#what[@]} -gt 0 ]; then
	echo
	echo "== what failed"
	printf '%s\n' "${what[@]}"
	exit 1
fi
