#!/bin/bash
# Regenerates the screenshots in docs/img/ from real runs: the doctor's page
# of the lab's sndbuf-limited fault, stat's page of a loopback transfer with
# a 16 KB send buffer, and pcap --graphs of a test capture. Needs root and
# chromium; everything it starts it ends, and its files live in a temporary
# directory.
set -euo pipefail
bin=${1:-bin/skbtrace}
out=docs/img
mkdir -p "$out"
tmp=$(mktemp -d)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

shot() { # page png height
	chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/profile" \
		--window-size=1040,"$3" --virtual-time-budget=3000 --screenshot="$2" "file://$1" 2>/dev/null
}

"$bin" lab run sndbuf-limited --doctor --html-dir "$tmp"
shot "$tmp/sndbuf-limited.html" "$out/doctor-report.png" 2200

"$bin" load server --listen 127.0.0.1:5299 &
server=$!
sleep 0.5
"$bin" doctor --trace "$tmp/run.trace" -o "$tmp/doctor.txt" -- "$bin" load client 127.0.0.1:5299 -d 3 --sndbuf 16384
"$bin" stat -i "$tmp/run.trace" --html "$tmp/stat.html" >/dev/null
shot "$tmp/stat.html" "$out/stat-report.png" 1800

"$bin" pcap internal/analyze/pcap/testdata/loss-sender.pcap.gz --graphs "$tmp/graphs" >/dev/null
shot "$tmp/graphs/index.html" "$out/pcap-graphs.png" 1400
echo "screenshots in $out"
