#!/usr/bin/env bash
# Run every fuzz target for a while: scripts/fuzz.sh [TIME per target].
# New inputs that fail are written to the package's testdata/fuzz/ and so
# become part of the seed corpus that every `go test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
time=${1:-60s}
grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sort | while IFS=: read -r file fn; do
  target=${fn#func }
  pkg=./$(dirname "${file#./}")
  echo "== $pkg $target ($time)"
  go test -run '^$' -fuzz "^$target\$" -fuzztime "$time" "$pkg"
done
