# shellcheck shell=bash
# Sourced by the guest scripts: installs what this machine lacks (CI starts
# from a fresh one).
#
#   install_missing NAME PKG...  installs the PKGs with this machine's apt, if
#                                any are given; NAME starts the messages; exits
#                                1 when the install fails. It waits for a dpkg
#                                lock another install holds (guests are set
#                                up side by side).
install_missing() {
	local name=$1
	shift
	[ $# -gt 0 ] || return 0
	echo "$name: installing $*" >&2
	export DEBIAN_FRONTEND=noninteractive
	{ apt-get update -qq && apt-get install -y -qq -o DPkg::Lock::Timeout=300 --no-install-recommends "$@"; } >/dev/null ||
		{ echo "$name: installing $* failed" >&2; exit 1; }
}
