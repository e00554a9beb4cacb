#!/bin/bash
# make demo: records a short loopback transfer with skbtrace and prints its
# events, the way blktrace | blkparse shows a block device at work.
set -euo pipefail
bin=${1:-bin/skbtrace}
if [ "$(id -u)" != 0 ]; then
	echo "demo: tracing needs root (CAP_BPF+CAP_PERFMON); run 'sudo make demo'" >&2
	exit 1
fi

work=$(mktemp -d)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

port=$((20000 + RANDOM % 20000))
iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
server=$!
sleep 0.5

echo "== skbtrace record: a 3-second iperf3 stream on 127.0.0.1:$port"
"$bin" record -o "$work/demo.trace" --filter-port "$port" -- \
	iperf3 -c 127.0.0.1 -p "$port" -t 3 -C cubic -f m | grep -E 'sender|receiver' || true
"$bin" parse -i "$work/demo.trace" >"$work/demo.txt"
echo
echo "== skbtrace parse: connection states"
grep 'action=tcp_conn' "$work/demo.txt" | sed -n 1,12p
echo
echo "== skbtrace parse: why the sender stopped sending (first folded runs)"
grep 'action=tcp_sendlim' "$work/demo.txt" | sed -n 1,8p
echo
echo "== decisions per reason (sum of cnt), per socket"
awk '/action=tcp_sendlim/ {
	for (i = 1; i <= NF; i++) { if ($i ~ /^sock=/) s = $i; if ($i ~ /^cnt=/) { split($i, a, "="); n[s " " $5] += a[2] } }
} END { for (k in n) printf "  %-32s %d\n", k, n[k] }' "$work/demo.txt" | sort
