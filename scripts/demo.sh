#!/usr/bin/env bash
# The README's first command ends here: start the VM if it is not running,
# then run a real program in the data image through `pybox run` — a CSV in,
# a summary printed and a chart (PNG) back out.
set -euo pipefail
cd "$(dirname "$0")/.."

bin/pybox vm status >/dev/null 2>&1 || bin/pybox vm start
mkdir -p build/demo
cat > build/demo/sales.csv <<'CSV'
region,month,sales
north,1,120
north,2,135
south,1,80
south,2,95
east,1,60
east,2,71
CSV
echo "== pybox run --image data scripts/demo.py (sales.csv in, chart.png out)"
bin/pybox run --image data --timeout 30 --file build/demo/sales.csv --out build/demo scripts/demo.py
echo "== returned files are in build/demo/RUN_ID/:"
ls -l build/demo/*/
