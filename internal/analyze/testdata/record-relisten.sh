#!/bin/bash
# Records iperf3-relisten.trace: a loopback iperf3 run whose server listens
# again after the test, often in the memory of a socket it accepted (keep a
# run where `skbtrace parse` shows the new LISTEN's sock= on the receiver).
# Usage, as root: record-relisten.sh SKBTRACE OUT.trace [PORT]
set -eu
skbtrace=$1 out=$2 port=${3:-42201}
"$skbtrace" record -e tcp_conn,tcp_rtt,tcp_stage,tcp_sendlim,dev_xmit,dev_recv --filter-port "$port" -d 3.5 -o "$out" &
rec=$!
sleep 1
iperf3 -s -p "$port" >/dev/null 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true' EXIT
sleep 0.4
iperf3 -c 127.0.0.1 -p "$port" -t 1
sleep 1
kill $srv
wait $rec
