# shellcheck shell=bash
# Sourced by fetch.sh and busybox.sh: an apt of their own for one Debian
# suite and architecture, so /etc/apt and the host's package state are never
# touched and packages of another architecture can be downloaded.
#
#   debian_apt NAME SUITE ARCH  sets aptopts (apt-get and apt-cache options)
#                               and apt_dir (its tree under the kernel cache);
#                               NAME starts the messages (the caller's name)
#   debian_apt_update           refreshes that suite's package index
#
# amd64's tree stays at apt/SUITE, where fetch.sh always kept it; another
# architecture's is apt/ARCH-SUITE (apt's lists hold one architecture).

debian_apt() {
	local suite=$2 arch=$3 cache=${SKBTRACE_KERNEL_CACHE:-$HOME/.cache/skbtrace/kernels} mirror keyring
	apt_name=$1 apt_suite=$suite apt_arch=$arch
	apt_dir=$cache/apt/$suite
	[ "$arch" = amd64 ] || apt_dir=$cache/apt/$arch-$suite

	# Same mirror as the system's sources, if it names one.
	mirror=$(sed -n 's/^URIs: *\(http[^ ]*\/debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
	mirror=${mirror:-http://deb.debian.org/debian}
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg

	# apt's own tree: sources, lists, cache and an empty dpkg status.
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial" "$apt_dir/etc/preferences.d" "$apt_dir/etc/trusted.gpg.d"
	touch "$apt_dir/status"
	cat >"$apt_dir/sources.list" <<EOF
deb [signed-by=$keyring] $mirror $suite main
deb [signed-by=$keyring] $mirror $suite-updates main
deb [signed-by=$keyring] ${mirror}-security $suite-security main
EOF
	aptopts=(
		-o Dir::Etc::sourcelist="$apt_dir/sources.list"
		-o Dir::Etc::sourceparts=-
		-o Dir::Etc::preferences="$apt_dir/etc/preferences"
		-o Dir::Etc::preferencesparts="$apt_dir/etc/preferences.d"
		-o Dir::Etc::trusted="$apt_dir/etc/trusted.gpg"
		-o Dir::Etc::trustedparts="$apt_dir/etc/trusted.gpg.d"
		-o Dir::State="$apt_dir"
		-o Dir::State::lists="$apt_dir/lists"
		-o Dir::State::status="$apt_dir/status"
		-o Dir::Cache="$apt_dir"
		-o Dir::Cache::archives="$apt_dir/archives"
		-o APT::Architecture="$arch"
		-o APT::Architectures="$arch"
		-o Acquire::Languages=none
		# the cache lives under $HOME, which apt's _apt user cannot enter
		-o APT::Sandbox::User=root
	)
}

debian_apt_update() {
	local what=$apt_suite
	[ "$apt_arch" = amd64 ] || what="$apt_suite $apt_arch"
	echo "$apt_name: updating the $what package index" >&2
	apt-get "${aptopts[@]}" -qq update >&2 || {
		echo "$apt_name: apt-get update of $apt_suite failed" >&2
		return 1
	}
}
