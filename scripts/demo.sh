#!/bin/bash
# make demo: seed 001's case on the lab. A bulk TCP stream between two network
# namespaces with a send buffer too small; skbtrace shows the sender stopped by
# its send buffer; the fix; the throughput again. The lab removes everything
# it created when it ends.
set -euo pipefail
bin=${1:-bin/skbtrace}
if [ "$(id -u)" != 0 ]; then
	echo "demo: tracing and namespaces need root; run 'sudo make demo'" >&2
	exit 1
fi
exec "$bin" lab demo
