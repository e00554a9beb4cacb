#!/bin/bash
# Records iperf3-stage.trace: a second of loopback iperf3 with tcp_stage
# attached all the time, whose sent bytes wait 0.4 us in the driver, 5 us
# in the send queue and 100s of us for the ACK, and never in a qdisc (lo
# has none).
# Usage, as root: record-stage.sh SKBTRACE OUT.trace [PORT]
set -eu
skbtrace=$1 out=$2 port=${3:-17703}
iperf3 -s -p "$port" -1 -D
sleep 0.5
"$skbtrace" record -e tcp_conn,tcp_rtt,tcp_stage --filter-port "$port" -o "$out" -- iperf3 -c 127.0.0.1 -p "$port" -t 1
