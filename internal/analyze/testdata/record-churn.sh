#!/bin/bash
# Records churn.trace: churn.py's 2*N short connections to 127.0.0.1:PORT
# (N from fresh ports, N from one reused port), with tcp_conn and tcp_stage,
# whose samples are flushed after the sockets' memory began new lives.
# Usage, as root: record-churn.sh SKBTRACE OUT.trace [N] [PORT]
set -eu
skbtrace=$1 out=$2 n=${3:-25} port=${4:-24391}
"$skbtrace" record -e tcp_conn,tcp_stage --filter-port "$port" -d 8 -o "$out" \
	-- python3 "$(dirname "$0")/churn.py" "$n" "$port"
