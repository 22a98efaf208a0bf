#!/usr/bin/env bash
# Installs Debian's chromium, once, for the web console's browser tests
# (internal/browsertest). Outside CI it never fails the build: without a
# browser those tests skip and say why. Under CI (CI=true) a missing browser
# fails here, as the browser tests themselves would (internal/testskip).
set -uo pipefail
for b in "${PORTSIDE_CHROMIUM:-}" chromium chromium-browser google-chrome; do
	if [[ -n "$b" ]] && command -v "$b" >/dev/null 2>&1; then
		exit 0
	fi
done
skip() {
	case "${CI:-}" in
	true | TRUE | True | 1 | t | T)
		echo "ensure-chromium: $1: CI=true, and the browser tests fail without Chromium (install it, or set PORTSIDE_CHROMIUM)" >&2
		exit 1
		;;
	esac
	echo "ensure-chromium: $1: the browser tests will skip (install Chromium, or set PORTSIDE_CHROMIUM)" >&2
	exit 0
}
command -v apt-get >/dev/null 2>&1 || skip "no apt-get"
sudo=()
if [[ "$(id -u)" != 0 ]]; then
	if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo=(sudo -n); else skip "not root and no password-less sudo"; fi
fi
echo "ensure-chromium: installing Debian's chromium (for the web console's browser tests)"
log=$(mktemp)
if ! { "${sudo[@]}" apt-get update -q && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q --no-install-recommends chromium; } >"$log" 2>&1; then
	tail -5 "$log" >&2
	rm -f "$log"
	skip "apt-get install chromium failed"
fi
rm -f "$log"
