#!/bin/bash
# Usage: scripts/kernels/nics.sh KERNEL:MODEL:BACKEND[:LAB]...   (what `make nics` runs)
#   e.g. 6.12:e1000e:hub:nic-tso-off,nic-gro-off 6.12:virtio-net-pci:tap
#   LAB: the lab's NIC scenarios to run on that wire with the doctor
#
# For each configuration: boots the KERNEL (5.10, 6.1, 6.12) with run.sh and
# two NICs of QEMU's MODEL (e1000e, e1000, virtio-net-pci, vmxnet3) cabled to
# each other through BACKEND (hub or tap, run.sh's SKBTRACE_VM_NIC_BACKEND),
# and runs nic-guest.sh there on the prebuilt bin/skbtrace and bin/e2e.test,
# one guest at a time (the machine has two cores), each allowed 30 minutes
# (SKBTRACE_VM_TIMEOUT; a guest takes 6-10 here). Output of each goes to
# out/nics/<KERNEL>-<MODEL>-<BACKEND>/ (guest.log plus what nic-guest.sh
# writes; kernel.env names the kernel's release and package version, the
# point release). Prints a summary naming both, what each family recorded
# on each driver and the counter comparisons; fails if any configuration
# failed. SKBTRACE_GUEST_RUN, a go test -run pattern, runs those e2e tests
# in place of the TestNICWire ones.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
[ $# -gt 0 ] || { echo "usage: $0 KERNEL:MODEL:BACKEND..." >&2; exit 2; }
[ -x bin/skbtrace ] || { echo "nics: bin/skbtrace is missing; run make build" >&2; exit 1; }
[ -x bin/e2e.test ] || { echo "nics: bin/e2e.test is missing; run go test -c -o bin/e2e.test ./test/e2e" >&2; exit 1; }
for cfg in "$@"; do
	IFS=: read -r ver model backend _ <<<"$cfg"
	case "$ver:$model:$backend" in
	*:*:hub | *:*:tap) [ -n "$ver" ] && [ -n "$model" ] && continue ;;
	esac
	echo "nics: '$cfg' is not KERNEL:MODEL:BACKEND[:LAB] with BACKEND hub or tap" >&2
	exit 2
done

summary=() bad=0 dirs=()
for cfg in "$@"; do
	IFS=: read -r ver model backend lab <<<"$cfg"
	out=out/nics/$ver-$model-$backend
	dirs+=("$out")
	rm -rf "$out"
	mkdir -p "$out"
	echo "== $ver $model $backend" >&2
	start=$SECONDS rc=0
	if ! "$here/fetch.sh" "$ver" >"$out/kernel.env"; then
		summary+=("$(printf '%-5s %-15s %-4s %-36s %s' "$ver" "$model" "$backend" - "FAILED (fetch)")")
		bad=1
		continue
	fi
	SKBTRACE_VM_NIC=$model SKBTRACE_VM_NIC_BACKEND=$backend SKBTRACE_VM_TIMEOUT=${SKBTRACE_VM_TIMEOUT:-1800} \
		"$here/run.sh" "$ver" -e SKBTRACE=bin/skbtrace -e E2E=bin/e2e.test -e OUT="$out" -e NIC_LAB="$lab" -e RUN="${SKBTRACE_GUEST_RUN:-}" -- bash scripts/kernels/nic-guest.sh 2>&1 |
		tee "$out/guest.log" || rc=${PIPESTATUS[0]}
	rel="$(sed -n 's/^KERNEL_RELEASE=//p' "$out/kernel.env") ($(sed -n 's/^KERNEL_DEB_VERSION=//p' "$out/kernel.env"))"
	if [ "$rc" = 0 ]; then
		summary+=("$(printf '%-5s %-15s %-4s %-36s ok, %ss' "$ver" "$model" "$backend" "$rel" $((SECONDS - start)))")
	else
		summary+=("$(printf '%-5s %-15s %-4s %-36s FAILED (exit %s), %ss, see %s' "$ver" "$model" "$backend" "$rel" "$rc" $((SECONDS - start)) "$out/guest.log")")
		bad=1
	fi
done

echo "== NIC wires"
printf '%s\n' "${summary[@]}"

# Family by driver: the events each family recorded of the stream over the
# wire (TestNICWireFamiliesAgreeWithTheDriver's families.tsv), "none" for a
# family that recorded nothing, "?" where the test did not get that far.
echo
printf '| family |'
for d in "${dirs[@]}"; do printf ' %s |' "${d#out/nics/}"; done
printf '\n|---|'
for d in "${dirs[@]}"; do printf -- '---|'; done
echo
families=$({ cut -f1 "${dirs[@]/%//families.tsv}" 2>/dev/null || true; } | sort -u)
for fam in $families; do
	printf '| `%s` |' "$fam"
	for d in "${dirs[@]}"; do
		n=$(awk -F'\t' -v f="$fam" '$1 == f { print $2 }' "$d/families.tsv" 2>/dev/null || true)
		case "$n" in
		'') printf ' ? |' ;;
		0) printf ' none |' ;;
		*) printf ' %s |' "$n" ;;
		esac
	done
	echo
done

# BPF program runs per wire packet (both directions) with every family
# attached all the time (runs.tsv): all programs, and dev_recv's.
echo
echo "== BPF runs per wire packet, every family all the time: all programs / dev_recv"
for d in "${dirs[@]}"; do
	printf '  %-28s %s\n' "${d#out/nics/}" "$(awk -F'\t' '{ print $1 " / " $2 }' "$d/runs.tsv" 2>/dev/null || echo '?')"
done

# The comparisons of each configuration: what skbtrace traced, the counter,
# their difference and the verdict (figures.tsv).
for d in "${dirs[@]}"; do
	echo
	echo "== ${d#out/nics/}: skbtrace against the counters"
	if [ -s "$d/figures.tsv" ]; then
		awk -F'\t' '{ printf "  %-75s %12s %12s %9s  %s\n", $1, $2, $3, $4, $5 }' "$d/figures.tsv"
	else
		echo "  (no figures: see $d/guest.log)"
	fi
done

# Last, so that a shortened log (CI keeps the end) still names what failed:
# each failed guest's failed steps and tests.
if [ "$bad" != 0 ]; then
	echo
	echo "== what failed"
	printf '%s\n' "${summary[@]}" | grep FAILED || true
	for d in "${dirs[@]}"; do
		log=$d/guest.log
		[ -f "$log" ] || continue
		# A failed test's own lines (go test -v prints them between its
		# === RUN and its --- FAIL), its last 30, and the guest's verdicts.
		# The lab's scenarios not reproduced or judged otherwise by the doctor.
		# A guest that died (run.sh's "ended without an exit status" and the
		# console's last lines) is named with the test it was running.
		awk '/^=== RUN/ { n = 0; running = $0; next }
			/^run: / { print; if (running != "") print "  while: " running; console = 1; next }
			console && /^  console: / { print; next }
			/^[a-z0-9-]+: (reproduced|NOT reproduced)/ { scenario = $0 }
			/^[a-z0-9-]+: NOT reproduced/ { print; next }
			/DISAGREES/ { print scenario; print; next }
			/^[ \t]/ { buf[n++ % 30] = $0; next }
			/^--- FAIL/ { print; for (i = (n > 30 ? n - 30 : 0); i < n; i++) print buf[i % 30]; n = 0; next }
			/^(FAIL|panic:|guest: failed|skbtrace: the doctor)/ { print }' "$log" | sed "s|^|${log%/guest.log}: |" || true
	done
fi
exit "$bad"
