#!/bin/bash
# Runs inside a NIC guest (scripts/kernels/run.sh with SKBTRACE_VM_NIC): two
# NICs of one model cabled to each other. Loads the drivers, finds the NICs
# by the MACs run.sh gave them, and runs the prebuilt skbtrace and e2e test
# binary's TestNICWire tests over them. Leaves results in $OUT:
# identity-<dev>.txt (what ethtool says of each NIC), events.json, test.log,
# the test's families.tsv and figures.tsv, and dmesg.txt. Each step prints
# a header; the script goes on after a failed step and exits non-zero if
# any failed.
#
# Environment:
#   NIC_LAB   lab scenarios to run on the wire, comma-separated (none: skipped)
#   SKBTRACE  the skbtrace binary (default bin/skbtrace)
#   E2E       the e2e test binary (default bin/e2e.test, from go test -c)
#   OUT       directory for result files
#   RUN       the e2e tests to run, a go test -run pattern (default
#             ^TestNICWire; nics.sh passes SKBTRACE_GUEST_RUN, to rerun one,
#             or none with a pattern no test matches)
set -euo pipefail

source "$(dirname "$0")/guest-common.sh"

release=$(uname -r)
# The sender's NIC is the first run.sh wires, the receiver's the second.
snd_mac=52:54:00:5b:00:01 rcv_mac=52:54:00:5b:00:02
snd='' rcv=''

# The guest has no udev to load drivers for the devices it finds: every
# model's driver is loaded by hand (those without a device stay idle).
load_drivers() {
	local m
	for m in e1000e e1000 virtio_net vmxnet3; do
		modprobe "$m" || return 1
	done
}

# find_nics: sets snd and rcv to the names of the NICs with the wire's MACs,
# waiting up to 10 s for the drivers to register them.
find_nics() {
	local try
	for ((try = 0; try < 100; try++)); do
		snd=$(ip -br link | awk -v m="$snd_mac" '$3 == m { print $1 }')
		rcv=$(ip -br link | awk -v m="$rcv_mac" '$3 == m { print $1 }')
		if [ -n "$snd" ] && [ -n "$rcv" ]; then
			echo "sender NIC $snd ($snd_mac), receiver NIC $rcv ($rcv_mac)"
			return 0
		fi
		sleep 0.1
	done
	echo "guest: no NICs with MACs $snd_mac and $rcv_mac:"
	ip -br link
	return 1
}

# identity: what the driver says of each NIC. Not every driver answers
# every question (e1000e has no channels): the answer is kept either way.
identity() {
	local dev opt
	for dev in "$snd" "$rcv"; do
		for opt in -i -k -g -l -c; do
			echo "# ethtool $opt $dev"
			ethtool "$opt" "$dev" 2>&1 || echo "(ethtool $opt: exit $?)"
			echo
		done >"$OUT/identity-$dev.txt"
		sed -n 's/^driver: //p' "$OUT/identity-$dev.txt"
	done
}

e2e() {
	cd "$(dirname "$0")/../../test/e2e"
	rm -f "$OUT/families.tsv" "$OUT/figures.tsv" "$OUT/runs.tsv"
	SKBTRACE_BIN=$SKBTRACE SKBTRACE_NIC_WIRE=$snd,$rcv SKBTRACE_NIC_OUT=$OUT CI=true \
		"$E2E" -test.v -test.count=1 -test.timeout 30m -test.run "${RUN:-^TestNICWire}" 2>&1 | tee "$OUT/test.log"
	return "${PIPESTATUS[0]}"
}

# The tests hand the NICs back when they delete their namespaces; checked
# here as well, since a NIC left in a namespace would fail every later step.
nics_home() {
	ip -br link show dev "$snd" && ip -br link show dev "$rcv"
}

step load-drivers load_drivers
step find-nics find_nics
if [ -z "$snd" ] || [ -z "$rcv" ]; then
	echo "guest: failed steps on $release: ${failed[*]}"
	exit 1
fi
step identity identity
step events-json sh -c '"$0" events --json >"$1"' "$SKBTRACE" "$OUT/events.json"
step e2e e2e
# What the drivers logged (link changes, transmit hangs, resets).
dmesg >"$OUT/dmesg.txt" 2>&1 || echo "guest: reading the kernel log failed"
step nics-home nics_home
# The device faults on this wire with the doctor (lab run --wire): each
# must reproduce, or be skipped with the driver's reason, and the doctor's
# top finding must be the expected one. NIC_LAB names them, comma-separated.
lab_wire() {
	local rc=0
	"$SKBTRACE" lab run --wire "$snd,$rcv" --doctor --html-dir "$OUT/lab" ${NIC_LAB//,/ } >"$OUT/lab.txt" 2>&1 || rc=$?
	cat "$OUT/lab.txt"
	return "$rc"
}
if [ -n "${NIC_LAB:-}" ]; then
	step lab-wire lab_wire
	step nics-home-after-lab nics_home
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "guest: failed steps on $release: ${failed[*]}"
	exit 1
fi
echo "guest: all steps passed on $release"
