#!/bin/bash
# Makes the capture `make bench` reads skbtrace pcap's speed from: 4 parallel
# iperf3 TCP streams between two network namespaces over a veth pair (MTU
# 1500, TSO/GSO/GRO off, so every frame is at most 1500 bytes), captured with
# tcpdump -s 128 on the sender's side; about 200 MB. Then a file 10 times as
# large (the same packets 10 times over, later timestamps each time) for the
# memory check. Traffic stays between the two namespaces it creates, which
# it removes on every exit, with the processes it started.
#
#   scripts/pcap-bench-capture.sh [DIR]   writes DIR/bench.pcap, DIR/bench-10x.pcap
#                                         (default /tmp/skbtrace-pcap-bench)
set -euo pipefail

dir=${1:-/tmp/skbtrace-pcap-bench}
lock=/tmp/skbtrace-lab.lock
bytes=${SKBTRACE_PCAP_BENCH_BYTES:-1800M} # iperf3's total; ~200 MB of capture
if [ "$(id -u)" != 0 ]; then
	echo "pcap-bench-capture: namespaces need root" >&2
	exit 1
fi
for tool in ip ethtool iperf3 tcpdump flock go; do
	command -v "$tool" >/dev/null || { echo "pcap-bench-capture: $tool is missing (make deps)" >&2; exit 1; }
done
mkdir -p "$dir"
cd "$(dirname "$0")/.."

a=skbpb-a-$$ b=skbpb-b-$$
locker='' server='' tcpdump='' client=''
cleanup() {
	for pid in $locker $client $server $tcpdump; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	ip netns del "$a" 2>/dev/null || true
	ip netns del "$b" 2>/dev/null || true
	rm -f "$dir/bench.pcap.part" "$dir/bench-10x.pcap.part" "$dir/tcpdump.log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The lab lock keeps other benchmarks off the CPUs and the lab meanwhile;
# the children close its descriptor so that only this shell holds it. A
# caller already holding it (flock /tmp/skbtrace-lab.lock make bench) says
# so with SKBTRACE_LAB_LOCKED=1, or this would wait for it forever.
exec 9>>"$lock"
if [ -z "${SKBTRACE_LAB_LOCKED:-}" ]; then
	echo "pcap-bench-capture: waiting for the lab lock $lock" >&2
	# Each wait is on a background process, so that a signal ends it.
	flock 9 &
	locker=$!
	wait "$locker"
	locker=''
fi

ip netns add "$a"
ip netns add "$b"
ip -n "$a" link add veth0 mtu 1500 type veth peer name veth1 mtu 1500 netns "$b"
ip -n "$a" addr add 10.213.15.1/24 dev veth0
ip -n "$b" addr add 10.213.15.2/24 dev veth1
for ns in "$a:veth0" "$b:veth1"; do
	ip -n "${ns%%:*}" link set lo up
	ip -n "${ns%%:*}" link set "${ns#*:}" up
	ip netns exec "${ns%%:*}" ethtool -K "${ns#*:}" tso off gso off gro off 9>&-
done

# waitfor CMD...: up to 5 s for CMD to succeed.
waitfor() {
	for _ in $(seq 50); do
		"$@" && return 0
		sleep 0.1
	done
	echo "pcap-bench-capture: timed out waiting for: $*" >&2
	return 1
}

ip netns exec "$b" iperf3 -s -B 10.213.15.2 -1 >/dev/null 9>&- &
server=$!
ip netns exec "$a" tcpdump -i veth0 -s 128 -B 65536 -w "$dir/bench.pcap.part" tcp 9>&- 2>"$dir/tcpdump.log" &
tcpdump=$!
waitfor grep -q "listening on" "$dir/tcpdump.log"
waitfor bash -c "ip netns exec $b ss -Hltn | grep -q 10.213.15.2:5201"
ip netns exec "$a" iperf3 -c 10.213.15.2 -P 4 -n "$bytes" -l 128K >/dev/null 9>&- &
client=$!
wait "$client"
client=''
kill -INT "$tcpdump"
wait "$tcpdump" || true
tcpdump=''
wait "$server" || true
server=''
cat "$dir/tcpdump.log" >&2
rm -f "$dir/tcpdump.log"
mv "$dir/bench.pcap.part" "$dir/bench.pcap"
exec 9>&- # the lab is free again

go run ./scripts/pcaprepeat -n 10 "$dir/bench.pcap" "$dir/bench-10x.pcap.part"
mv "$dir/bench-10x.pcap.part" "$dir/bench-10x.pcap"
ls -l "$dir/bench.pcap" "$dir/bench-10x.pcap" >&2
