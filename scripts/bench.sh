#!/usr/bin/env bash
# `make bench`: PyBox and the alternatives a user would pick instead
# (bare python3, bubblewrap, gVisor, Pyodide, a fresh VM per call), timed
# side by side in one run by BenchmarkReport (e2e/bench_e2e_test.go).
# Writes build/bench/results.md and build/bench/results.json.
#
# Knobs (environment): BENCH_RUNS (samples per figure, default 7),
# BENCH_BOOTS (3), BENCH_CALLS (sequential calls for throughput and drift,
# 500), BENCH_PLOT_RUNS (matplotlib PNG calls, 2), BENCH_PANDAS_RUNS (5),
# BENCH_WARM_RUNS (each warm and cold call: after a 2 s think, back to back,
# and, warm, with the box ready; 3),
# BENCH_ONLY (a comma-separated subset of alternatives, boots, vm, warm,
# data, packages: a wheel from a loopback package index (image build --pip)
# beside numpy from Debian, imported warm and cold; memory, hardening,
# arm64: the arm64 guest emulated by QEMU beside
# this host's, which needs `make ARCH=arm64` and its stdlib image, as
# `make bench` builds them; relay: the host's round trip beside the code
# before the relay became a router of framed bytes, BENCH_BEFORE, built
# once by scripts/bench-before.sh; outdir: the output folder's admission
# with 100,000 files of earlier runs, the old walk beside the ledger, in
# process, no VM; jail: boot and a warm call with QEMU jailed beside
# unjailed; agents: 1, 2 and 4 agents calling at once, and one agent's
# print(1) beside a run spinning on every CPU; net: a 100 MB download
# from the host's loopback through the box's proxy (--allow-net), HTTP
# and HTTPS, beside curl on the host, and print(1) with the option and
# without), BENCH_DROP_CACHES=0 (keep the host page cache before the
# cold boots; by default they drop it, which needs root).
# BENCH_INITRAMFS is the benchmark build of the agent (make bench-guest),
# whose console can switch off the posture check and the seccomp filter;
# `make bench` sets it, and without it the hardening part says skipped.
# The defaults took 5 minutes under TCG on 2 idle cores (twice that under load).
set -euo pipefail
cd "$(dirname "$0")/.."

out=${BENCH_OUT:-$PWD/build/bench}
mkdir -p "$out"
export BENCH_OUT=$out

# The bench boots one VM at a time; it needs what the e2e suite needs
# (kernel, initramfs, QEMU, the stdlib and data images) and says which
# alternative it could not run rather than failing.
for tool in bwrap runsc node; do
  command -v "$tool" >/dev/null || echo "bench: no $tool: its row will say skipped (run \`make deps\`)" >&2
done

# The relay part's baseline: the last commit before a run was checked once
# a side and the supervisor stopped decoding what it relays. Its build is
# cached; a clone without that history skips the part, saying why.
if [ -z "${BENCH_BEFORE_DIR:-}" ] && { [ -z "${BENCH_ONLY:-}" ] || [[ ",$BENCH_ONLY," == *,relay,* ]]; }; then
  if BENCH_BEFORE_DIR=$(scripts/bench-before.sh "${BENCH_BEFORE:-e34b9cc}"); then
    export BENCH_BEFORE_DIR
  else
    echo "bench: could not build the code before the relay change: the relay part will say skipped" >&2
  fi
fi

set +e
go test -count=1 -run '^$' -bench '^BenchmarkReport$' -benchtime=1x -timeout 60m -v ./e2e 2>&1 |
  tee "$out/bench.log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { echo "bench: failed (exit $rc), see $out/bench.log" >&2; exit 1; }
echo "bench: wrote $out/results.md and $out/results.json"
cat "$out/results.md"
