#!/usr/bin/env bash
# Runs every fuzz target for FUZZTIME (default 60s), one after another with
# one worker, and prints each one's last progress line. `make test` runs
# the seed corpora only.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-60s}
status=0
while IFS=: read -r file name; do
	pkg=./$(dirname "$file")
	echo "== $name ($pkg, $fuzztime)"
	if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -parallel 1 "$pkg" 2>&1); then
		echo "$out" | tail -30
		status=1
		continue
	fi
	echo "$out" | grep -E 'execs:' | tail -1 || true
done < <(git grep -n -o -E '^func Fuzz[A-Za-z0-9_]+' -- '*_test.go' | sed -E 's/:[0-9]+:func /:/')
exit $status
