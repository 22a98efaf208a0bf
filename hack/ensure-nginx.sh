#!/usr/bin/env bash
# Installs Debian's nginx-light and its stream module, once, for the data
# plane benchmarks (internal/localcloud/dataplane), which run nginx's
# `stream` proxy side by side with Portside's. Idempotent; never fails the
# build: without nginx the benchmarks run without it and say why.
# A package install may start a system nginx: it is stopped (by its pid
# file) so that nothing stays running; the benchmarks start their own.
set -uo pipefail
modules=(/usr/lib/nginx/modules/ngx_stream_module.so /usr/share/nginx/modules/ngx_stream_module.so)
have() {
	command -v nginx >/dev/null 2>&1 || return 1
	for m in "${modules[@]}"; do [[ -f "$m" ]] && return 0; done
	# Built in (some builds link stream statically).
	nginx -V 2>&1 | grep -q -- '--with-stream\b' && ! nginx -V 2>&1 | grep -q -- '--with-stream=dynamic'
}
have && exit 0
skip() { echo "ensure-nginx: $1: the data plane benchmarks run without nginx" >&2; exit 0; }
command -v apt-get >/dev/null 2>&1 || skip "no apt-get"
sudo=()
if [[ "$(id -u)" != 0 ]]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n); else skip "not root and no password-less sudo"; fi
fi
echo "ensure-nginx: installing Debian's nginx-light and libnginx-mod-stream (for the data plane benchmarks)"
log=$(mktemp)
# policy-rc.d exit 101 asks invoke-rc.d not to start the service on install.
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e "$policy" ]]; then
	printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && added_policy=1
fi
ok=1
{ "${sudo[@]}" apt-get update -q &&
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends nginx-light libnginx-mod-stream; } >"$log" 2>&1 || ok=0
[[ $added_policy == 1 ]] && "${sudo[@]}" rm -f "$policy"
# Stop a system nginx if the install started one anyway.
for pidfile in /run/nginx.pid /var/run/nginx.pid; do
	if [[ -s "$pidfile" ]]; then
		pid=$(cat "$pidfile")
		if [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == nginx ]]; then
			"${sudo[@]}" kill -QUIT "$pid" 2>/dev/null
			for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -d "/proc/$pid" ]] || break; sleep 0.2; done
			[[ -d "/proc/$pid" ]] && "${sudo[@]}" kill -KILL "$pid" 2>/dev/null
		fi
	fi
done
if [[ $ok == 0 ]]; then
	tail -5 "$log" >&2
	rm -f "$log"
	skip "apt-get install nginx-light libnginx-mod-stream failed"
fi
rm -f "$log"
have || skip "nginx or its stream module still missing after install"
