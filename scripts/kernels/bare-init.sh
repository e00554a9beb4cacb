#!/bin/busybox sh
# shellcheck shell=dash
# /init of the initramfs bare.sh builds; runs under busybox as PID 1 on a
# guest that has nothing but /bin/busybox (Debian's static build, no applet
# links), /bin/skbtrace (the static release binary) and this script: no
# libraries, no iproute2, ethtool or tc, no kernel modules. It uses
# skbtrace as a user on such a host would, step by step, each under a
# header:
#   1 version   2 events   3 record (a load client against a load server)
#   4 parse     5 stat     6 export (Perfetto and Parquet)
#   7 doctor (a client with a 16 KiB SO_SNDBUF: sndbuf-limited comes first)
# Each step's verdict is decided here. The last lines are "bare: PASS 7/7"
# or "bare: FAIL step N: why" and "skbtrace-bare-status=N" (N failed steps)
# for bare.sh, which reads the serial console; then it powers off.
#
# PATH holds /bin only, where no applet has a link: a program skbtrace
# tried to run (ip, tc, sysctl, sh, ...) is not found, as on a host without
# it. This shell runs busybox's applets without links (Debian's static
# build has FEATURE_SH_STANDALONE), once /proc/self/exe is there.
bb=/bin/busybox
$bb mkdir -p /proc /sys /dev /tmp /root
$bb mount -t proc proc /proc
export PATH=/bin HOME=/root TERM=dumb

mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup

# Seconds since boot, to a tenth.
now() { cut -d' ' -f1 /proc/uptime; }
boot=$(now)

# The end, whatever happens: the status line bare.sh waits for, then off.
finish() {
	echo "skbtrace-bare-status=$1"
	sync
	poweroff -f
	sleep 60 # poweroff -f returns before the machine is off
}

port=5201
addr=127.0.0.1:$port
total=7 n=0 failed=0 first='' summary=''
case "$(uname -m)" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac

echo "bare: kernel $(uname -r) ($arch), booted in ${boot}s; /:" /*
ip link set lo up || { echo "bare: FAIL step 0: ip link set lo up failed"; finish 1; }

# run LOG CMD...: runs CMD with stdin from /dev/null and stdout and stderr
# shown and kept in LOG (a pipe, not the console's terminal: no live status
# line), under a time limit; returns CMD's status.
set -o pipefail
run() {
	local log=$1
	shift
	echo "\$ $*"
	timeout 300 "$@" </dev/null 2>&1 | tee "$log"
}

# step NAME FUNCTION: one step under a header. FUNCTION returns non-zero
# with $why set when the step failed.
step() {
	local name=$1 t0 t rc
	n=$((n + 1))
	echo
	echo "======== bare step $n/$total: $name ========"
	t0=$(now) why='' rc=0
	"$2" || rc=$?
	t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
	if [ "$rc" = 0 ]; then
		echo "-------- bare step $n $name: PASS (${t}s)"
		summary="$summary
  step $n $name: PASS (${t}s)"
	else
		[ -n "$why" ] || why="exit status $rc"
		echo "-------- bare step $n $name: FAIL (${t}s): $why"
		summary="$summary
  step $n $name: FAIL (${t}s): $why"
		failed=$((failed + 1))
		[ -n "$first" ] || first="step $n: $why"
	fi
}

s_version() {
	run /tmp/version.log skbtrace version || { why="skbtrace version failed"; return 1; }
	grep -q "platform: linux/$arch" /tmp/version.log || { why="no 'platform: linux/$arch' in its output"; return 1; }
}

s_events() {
	run /tmp/events.log skbtrace events || { why="skbtrace events failed"; return 1; }
	grep -q '^tcp_conn  *ok ' /tmp/events.log || { why="tcp_conn is not ok"; return 1; }
	# The table's rows whose status is not ok, then the notes under the
	# table: why a family is skipped, what a fallback leaves out.
	awk -v k="$(uname -r) ($arch)" '
		/^FAMILY / { t = 1; next }
		t == 1 && !NF { t = 2; next }
		t == 1 && $2 != "ok" { skipped = skipped " " $1 }
		t == 2 && NF { notes[n++] = $0 }
		END {
			print "bare: families skipped on " k ":" (skipped == "" ? " none" : skipped)
			for (i = 0; i < n; i++) print "  " notes[i]
		}' /tmp/events.log
}

srv=''
s_record() {
	local i=0
	echo "\$ skbtrace load server --listen $addr &"
	skbtrace load server --listen "$addr" </dev/null >/tmp/server.log 2>&1 &
	srv=$!
	# Listening: port 5201 (0x1451) in state 0A of /proc/net/tcp.
	until grep -q ":1451 00000000:0000 0A" /proc/net/tcp; do
		i=$((i + 1))
		if [ "$i" -gt 300 ] || ! kill -0 "$srv" 2>/dev/null; then
			cat /tmp/server.log
			why="the load server is not listening on $addr"
			return 1
		fi
		sleep 0.1
	done
	run /tmp/record.log skbtrace record -o /tmp/t.skbt -- skbtrace load client "$addr" -d 3 ||
		{ why="skbtrace record failed"; return 1; }
	[ -s /tmp/t.skbt ] || { why="/tmp/t.skbt is missing or empty"; return 1; }
	grep -q 'recorded [1-9][0-9]* events' /tmp/record.log || { why="record says it recorded no events"; return 1; }
	ls -l /tmp/t.skbt
}

s_parse() {
	echo "\$ skbtrace parse -i /tmp/t.skbt >/tmp/parse.txt"
	timeout 300 skbtrace parse -i /tmp/t.skbt </dev/null >/tmp/parse.txt 2>/tmp/parse.err
	local rc=$?
	cat /tmp/parse.err
	echo "$(wc -l </tmp/parse.txt) lines; the first 10 and every tcp_conn:"
	head -n 10 /tmp/parse.txt
	grep 'action=tcp_conn' /tmp/parse.txt | head -n 20
	[ "$rc" = 0 ] || { why="skbtrace parse failed (exit $rc)"; return 1; }
	[ -s /tmp/parse.txt ] || { why="parse printed nothing"; return 1; }
	grep -q 'action=tcp_conn \[ESTABLISHED\].*peer=127.0.0.1:5201' /tmp/parse.txt ||
		{ why="no tcp_conn [ESTABLISHED] to $addr"; return 1; }
}

s_stat() {
	run /tmp/stat.log skbtrace stat -i /tmp/t.skbt || { why="skbtrace stat failed"; return 1; }
	grep -q "127.0.0.1:$port" /tmp/stat.log || { why="stat lists no connection with $addr"; return 1; }
}

s_export() {
	run /tmp/export.log skbtrace export /tmp/t.skbt --perfetto /tmp/t.perfetto.json --parquet /tmp/parquet ||
		{ why="skbtrace export failed"; return 1; }
	ls -l /tmp/t.perfetto.json /tmp/parquet
	[ -s /tmp/t.perfetto.json ] || { why="the Perfetto file is missing or empty"; return 1; }
	find /tmp/parquet -name '*.parquet' -size +0 | grep -q . || { why="no non-empty Parquet table in /tmp/parquet"; return 1; }
	grep -q '"ph":' /tmp/t.perfetto.json || { why="the Perfetto file holds no trace events"; return 1; }
}

s_doctor() {
	local top
	run /tmp/doctor.log skbtrace doctor --json -o /tmp/doctor.json --trace /tmp/doctor.skbt -- skbtrace load client "$addr" -d 5 --sndbuf 16384 ||
		{ why="skbtrace doctor failed"; return 1; }
	[ -s /tmp/doctor.json ] || { why="the doctor wrote no report"; return 1; }
	# The report's findings, healthy line and notes: everything before its
	# "evidence" object (the whole measurement, long).
	echo "/tmp/doctor.json up to its evidence:"
	awk '/^  "evidence"/ { exit } { print }' /tmp/doctor.json
	# The top finding is the first "id" inside the findings list.
	top=$(awk '/^  "findings": *\[\]/ { exit } /^  "findings"/ { f = 1 } f && /^      "id":/ { print; exit }' /tmp/doctor.json |
		sed 's/.*"id": *"\([^"]*\)".*/\1/')
	[ "$top" = sndbuf-limited ] && return 0
	why="the top finding is '${top:-none}', not sndbuf-limited"
	# What the doctor's own recording saw of the flow, for the report.
	echo "the doctor's recording (--trace), its connections:"
	skbtrace stat -i /tmp/doctor.skbt </dev/null 2>&1 | awk '/^CONNECTIONS/ { f = 1 } f && !NF { exit } f'
	return 1
}

step version s_version
step events s_events
step record s_record
step parse s_parse
step stat s_stat
step export s_export
step doctor s_doctor

[ -z "$srv" ] || kill "$srv" 2>/dev/null
# Kernel complaints during the run (BPF attach, tracing) are reported, not judged.
echo
echo "bare: kernel warnings: $(dmesg | grep -c -E 'WARNING:|BUG:|Oops|Call Trace')"
dmesg | grep -E -A3 'WARNING:|BUG:|Oops' | head -n 40
echo
echo "bare: summary on $(uname -r) ($arch): boot ${boot}s, total $(now)s$summary"
if [ "$failed" = 0 ]; then
	echo "bare: PASS $n/$total"
else
	echo "bare: FAIL $first ($((n - failed))/$total passed)"
fi
finish "$failed"
