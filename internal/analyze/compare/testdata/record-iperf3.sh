#!/bin/sh
# record-iperf3.sh NAME RATE: a fresh default-families recording of a 2 s
# loopback iperf3 stream into NAME.trace, with the record's and the
# command's wall times and iperf3's own rates beside it in NAME.json
# (as root; SKBTRACE names the binary). The fixtures were made with
#   record-iperf3.sh iperf3-400m 400M; record-iperf3.sh iperf3-800m 800M
set -e
name=$1 rate=$2 port=15302 out=$(dirname "$0")
skbtrace=${SKBTRACE:-skbtrace}
tmp=$(mktemp -d)
srv=
trap '[ -n "$srv" ] && kill "$srv" 2>/dev/null; rm -rf "$tmp"' EXIT
iperf3 -s -p $port -1 >/dev/null 2>&1 &
srv=$!
sleep 0.5
t0=$(date +%s.%N)
"$skbtrace" record -o $out/$name.trace -- sh -c "date +%s.%N > $tmp/wall; iperf3 -J -c 127.0.0.1 -p $port -t 2 -b $rate > $tmp/iperf3; date +%s.%N >> $tmp/wall"
t1=$(date +%s.%N)
wait $srv || true
srv=
python3 - "$tmp" "$out/$name" "$t0" "$t1" <<'PY'
import json, sys
tmp, base, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
c0, c1 = (float(x) for x in open(tmp + "/wall").read().split())
end = json.load(open(tmp + "/iperf3"))["end"]
json.dump({"record_wall_s": round(t1 - t0, 3), "command_wall_s": round(c1 - c0, 3),
           "iperf3_sent_bps": round(end["sum_sent"]["bits_per_second"]),
           "iperf3_received_bps": round(end["sum_received"]["bits_per_second"]),
           "iperf3_retransmits": end["sum_sent"]["retransmits"]}, open(base + ".json", "w"), indent=1)
PY
cat $out/$name.json
