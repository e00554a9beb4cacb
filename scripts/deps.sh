#!/bin/bash
# Installs what building, testing and the demo need, only when missing, so
# it is cheap to run on every make invocation. Needs root to install.
set -euo pipefail

need=()
command -v clang >/dev/null || need+=(clang)
command -v llvm-strip >/dev/null || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v bpftool >/dev/null || need+=(bpftool)
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v ethtool >/dev/null || need+=(ethtool)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v nft >/dev/null || need+=(nftables)
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v tcptrace >/dev/null || need+=(tcptrace) # make bench compares skbtrace pcap with it
[ -x /usr/bin/time ] || need+=(time)                # and reads peak RSS from GNU time
command -v chromium >/dev/null || need+=(chromium)
command -v ping >/dev/null || need+=(iputils-ping)
command -v python3 >/dev/null || need+=(python3)
command -v prometheus >/dev/null || need+=(prometheus) # the agent test scrapes with the real server
command -v lintian >/dev/null || need+=(lintian)       # make release's .debs must pass it (scripts/deb-check.sh)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]}; run as root (or install them) to continue" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

command -v go >/dev/null || { echo "deps: Go is not installed" >&2; exit 1; }
go mod download

# The Parquet export's test reads the tables with DuckDB, as users would.
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install --quiet duckdb
