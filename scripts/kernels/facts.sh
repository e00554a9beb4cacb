#!/bin/bash
# Runs inside a kernel-matrix guest: prints what skbtrace's probes depend on
# in this kernel (symbols, ftrace-able functions, BTF, tracepoint formats).
# Usage (host): scripts/kernels/run.sh 6.1 -- scripts/kernels/facts.sh >out/kernels/facts-6.1.txt
set -euo pipefail

t=/sys/kernel/tracing
syms=(tcp_set_ca_state cubictcp_state bbr_set_state tcp_enter_loss tcp_enter_cwr
	tcp_enter_recovery tcp_fastretrans_alert sock_sendmsg sock_recvmsg sock_write_iter
	sock_read_iter __sys_sendto tcp_sendmsg tcp_recvmsg inet_sendmsg inet_recvmsg
	dev_qdisc_enqueue __dev_queue_xmit tcp_rcv_space_adjust tcp_retransmit_skb)

# tcp_bbr is a module in Debian: load it so its functions can be listed.
modprobe tcp_bbr

echo "release: $(uname -r)"
echo "btf: $([ -e /sys/kernel/btf/vmlinux ] && echo yes || echo no)"
echo "available_filter_functions: $(grep -c . $t/available_filter_functions)"
echo
echo "# symbol: in kallsyms / in available_filter_functions (variants such as .isra or .part follow)"
# One pass over each big file (slow under emulation), then look up the rest.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%s\n' "${syms[@]}" >"$tmp/names"
awk 'NR == FNR { w[$1]; next } { n = $3; sub(/\..*/, "", n) } n in w' "$tmp/names" /proc/kallsyms >"$tmp/kallsyms"
awk 'NR == FNR { w[$1]; next } $1 in w' "$tmp/names" $t/available_filter_functions >"$tmp/ftrace"
for s in "${syms[@]}"; do
	k=$(awk -v s="$s" '$3 == s { print "yes" (NF > 3 ? " " $4 : ""); exit }' "$tmp/kallsyms")
	f=$(awk -v s="$s" '$1 == s { print "yes" (NF > 1 ? " " $2 : ""); exit }' "$tmp/ftrace")
	v=$(awk -v s="$s" 'index($3, s ".") == 1 { print $3 }' "$tmp/kallsyms" | sort -u | tr '\n' ' ')
	printf '%-24s kallsyms=%-14s ftrace=%-14s %s\n' "$s" "${k:-no}" "${f:-no}" "${v:+variants: $v}"
done
for e in tcp/tcp_retransmit_skb skb/kfree_skb tcp/tcp_send_reset; do
	echo
	echo "# $t/events/$e/format"
	cat "$t/events/$e/format" 2>&1 || true
done
for d in tcp sock net napi qdisc skb; do
	echo
	echo "# ls $t/events/$d"
	for e in "$t/events/$d"/*/; do
		e=${e%/}
		printf '%s ' "${e##*/}"
	done
	echo
done
