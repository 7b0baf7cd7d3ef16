#!/usr/bin/env bash
# Run every fuzz target for a while: scripts/fuzz.sh [TIME per target].
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-60s}
for pkg in $(go list ./...); do
  for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
    echo "== $pkg $target ($time)"
    go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$pkg"
  done
done
