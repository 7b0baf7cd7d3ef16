#!/usr/bin/env bash
# scripts/bench-before.sh COMMIT: builds PyBox as it was at COMMIT (its
# bin/pybox, kernel and initramfs, and a stdlib image made by its own
# binary), once, in $PYBOX_CACHE/before/COMMIT, and prints that directory.
# `make bench` times the host round trip of this tree against that one,
# side by side (the relay part). Everything it builds is cached: the kernel
# by its inputs as always, the rest under the commit's name.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# = 1 ] || { echo "usage: scripts/bench-before.sh COMMIT" >&2; exit 2; }
commit=$(git rev-parse --short=12 "$1^{commit}") ||
  { echo "bench-before: $1 is not a commit of this repository (a shallow clone? fetch its history)" >&2; exit 1; }
cache=${PYBOX_CACHE:-$HOME/.cache/pybox}
dir=$cache/before/$commit
if [ ! -e "$dir/ready" ]; then
  echo "bench-before: building PyBox at $commit in $dir (once; its stdlib image takes minutes)" >&2
  rm -rf "$dir"
  mkdir -p "$dir/src" "$dir/home"
  git archive "$commit" | tar -x -C "$dir/src"
  # Not a git checkout: the version is given, not worked out.
  make -C "$dir/src" all VERSION="before-$commit" COMMIT="$commit" >&2
  PYBOX_HOME=$dir/home "$dir/src/bin/pybox" image build stdlib >&2
  touch "$dir/ready"
fi
echo "$dir"
