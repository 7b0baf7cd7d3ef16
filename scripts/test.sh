#!/usr/bin/env bash
# Run every test: the unit tests of all packages (with their fuzz seed
# corpora), the host packages again under the race detector, then the
# end-to-end suite that drives the real binary against a real VM (e2e/).
# Prints one closing line: "N passed, M failed".
#
# scripts/test.sh e2e runs the end-to-end suite alone: make test-arm64
# runs it so against the arm64 guest (PYBOX_E2E_ARCH=arm64), whose unit
# tests are the same as the host's.
set -uo pipefail
cd "$(dirname "$0")/.."
only_e2e=false
[ "${1:-}" = e2e ] && only_e2e=true

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0

# The end-to-end packages boot VMs under TCG: run them one at a time, after
# the unit tests, so two VMs never share the 2 cores.
e2e="pybox/e2e"
unit=$(go list ./... | grep -vx "$e2e")

if ! $only_e2e; then
echo "== unit tests"
# Under -v every test prints RUN and PASS lines: keep the log whole, show
# the rest (package lines, failures, what tests print).
{ go test -count=1 -timeout 20m -v $unit; echo $? > "$log.rc"; } 2>&1 | tee -a "$log" |
  grep -vE '^(=== (RUN|PAUSE|CONT)|\s*--- PASS)' || true
[ "$(cat "$log.rc")" = 0 ] || status=1
rm -f "$log.rc"
echo "== the host packages under the race detector"
# pybox mcp and the supervisor serve many goroutines at once; a race there
# can kill them. Its tests count again here, as the seal switch's do below.
{ go test -count=1 -race -timeout 20m -v ./host/...; echo $? > "$log.rc"; } 2>&1 | tee -a "$log" |
  grep -vE '^(=== (RUN|PAUSE|CONT)|\s*--- PASS)' || true
[ "$(cat "$log.rc")" = 0 ] || status=1
rm -f "$log.rc"
echo "== the benchmark build's seal switch (make bench-guest; never shipped)"
{ go test -count=1 -tags pyboxbench -run 'Seal' -v ./guest/box ./guest/agent; echo $? > "$log.rc"; } 2>&1 | tee -a "$log" |
  grep -vE '^(=== (RUN|PAUSE|CONT)|\s*--- PASS)' || true
[ "$(cat "$log.rc")" = 0 ] || status=1
rm -f "$log.rc"
echo "== every fuzz target, briefly (make fuzz runs them longer)"
# fuzz.sh decides: a short run it retries (time out before fuzzing began,
# the fuzzer's own worker lost) is no finding, so its FAIL lines are not
# counted; its exit status is the one verdict, counted as one line.
{ scripts/fuzz.sh "${FUZZTIME:-3s}"; echo $? > "$log.rc"; } 2>&1 | grep -E '^(==|FAIL|---|ok|\s+\S+_test.go|    \S)' || true
[ "$(cat "$log.rc")" = 0 ] || { status=1; echo "--- FAIL: a fuzz target failed" >> "$log"; }
rm -f "$log.rc"
fi
echo "== end-to-end tests (real kernel, initramfs, images and QEMU; guest ${PYBOX_E2E_ARCH:-$(uname -m)})"
go test -count=1 -p 1 -timeout "${E2E_TIMEOUT:-60m}" -v "$e2e" 2>&1 | tee -a "$log.e2e" || status=1
cat "$log.e2e" >> "$log"; rm -f "$log.e2e"

# Every test and subtest that ran prints one PASS or FAIL line under -v; a
# package that did not build prints a FAIL line of its own.
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL|^FAIL\s' "$log")
echo
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] || status=1
exit $status
