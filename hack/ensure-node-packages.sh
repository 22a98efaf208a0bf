#!/usr/bin/env bash
# Installs, once, the Debian packages a real node of `portside up` runs
# besides what `make tools` builds (docs/local-cloud.md):
#   runc      the OCI runtime containerd-shim-runc-v2 execs (runc needs
#             cgo and libseccomp, so Debian's is used instead of building it);
#   nftables  nft, which kube-proxy's nftables mode and CNI portmap exec;
#   iptables  iptables(-restore/-save), for kube-proxy's iptables mode and
#             its clean-up of iptables leftovers.
# kube-proxy deletes conntrack entries over netlink: no conntrack binary.
# And the tools the agnhost image gets beside its static binary, where
# upstream's Alpine image has them (internal/nodeimages/tools.go copies
# them, with their shared libraries, from this host into the image):
#   busybox-static  the applets (cat, sleep, seq, ...); dash  sh;
#   wget; netcat-openbsd  nc; curl; bind9-dnsutils  dig, nslookup, host;
#   socat; iproute2  ip, ss; bash; coreutils, findutils, util-linux
#   timeout, env, xargs, setsid, ... (busybox's would run its applets).
# Installing never touches the host's network: the packages load no rules,
# and policy-rc.d keeps any service they ship from starting.
# Outside CI it never fails the build: it says what is missing and how to
# install it, and the real-node tests skip saying why. Under CI (CI=true) a
# missing package fails here, as those tests would (internal/testskip).
set -uo pipefail
# command → Debian package
declare -A pkg=([runc]=runc [nft]=nftables [iptables]=iptables)
missing=()
for c in runc nft iptables; do
	# /usr/sbin is not on every user's PATH; the packages install there.
	command -v "$c" >/dev/null 2>&1 || [[ -x /usr/sbin/$c ]] || missing+=("${pkg[$c]}")
done
# The image's tools are files of these exact packages (busybox's dynamic
# build or another netcat would not do): asked of dpkg, not of PATH.
for p in busybox-static dash wget netcat-openbsd curl bind9-dnsutils socat iproute2 bash coreutils findutils util-linux; do
	[[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
skip() {
	case "${CI:-}" in
	true | TRUE | True | 1 | t | T)
		echo "ensure-node-packages: $1: CI=true, and the real-node tests fail without ${missing[*]} (install them: sudo apt-get install ${missing[*]})" >&2
		exit 1
		;;
	esac
	echo "ensure-node-packages: $1: missing ${missing[*]}; real nodes cannot run and their tests skip (install them: sudo apt-get install ${missing[*]})" >&2
	exit 0
}
command -v apt-get >/dev/null 2>&1 || skip "no apt-get"
sudo=()
if [[ "$(id -u)" != 0 ]]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n); else skip "not root and no password-less sudo"; fi
fi
echo "ensure-node-packages: installing Debian's ${missing[*]} (for real nodes)"
log=$(mktemp)
# policy-rc.d exit 101 asks invoke-rc.d not to start a service on install
# (nftables ships one that would load /etc/nftables.conf).
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e "$policy" ]]; then
	printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && added_policy=1
fi
ok=1
{ "${sudo[@]}" apt-get update -q &&
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || ok=0
[[ $added_policy == 1 ]] && "${sudo[@]}" rm -f "$policy"
if [[ $ok == 0 ]]; then
	tail -5 "$log" >&2
	rm -f "$log"
	skip "apt-get install ${missing[*]} failed"
fi
rm -f "$log"
