#!/usr/bin/env bash
# Renders docs/dashboard/dashboard.png from a real run: fencegate-bench
# (throughput against PostgreSQL and the no-op route, then the safety
# scenario, whose paused holders are refused as stale) against a gateway with
# --metrics_listen, scraped once a second, each panel of
# docs/dashboard/grafana-dashboard.json computed from the scrapes and plotted
# with gnuplot (Debian gnuplot-nox).
#
#   scripts/dashboard_run.sh [BUILD_DIR]     (default build-rel)
#
# KEEP_SCRAPES=FILE keeps the scrapes, for `dashboard_render.py plot` again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-rel}
port=${METRICS_PORT:-9464}
work=$(mktemp -d)
trap 'kill "$sampler" 2>/dev/null || true; rm -rf "$work"' EXIT

python3 "$root/scripts/dashboard_render.py" sample "$port" "$work/scrapes.jsonl" &
sampler=$!
"$build/bench/fencegate-bench" all \
  --gateway_flag=--metrics_listen=127.0.0.1:$port \
  --targets=gateway-pg,gateway-noop --clients=16,64 --duration_s=10 \
  --safety_s=20 --json="$work/bench.json" --svg="$work/bench.svg" \
  --work_dir="$work" >"$work/bench.out"
kill "$sampler"
if [[ -n ${KEEP_SCRAPES:-} ]]; then cp "$work/scrapes.jsonl" "$KEEP_SCRAPES"; fi
python3 "$root/scripts/dashboard_render.py" plot "$work/scrapes.jsonl" \
  "$root/docs/dashboard/dashboard.png"
echo "wrote docs/dashboard/dashboard.png ($(wc -l <"$work/scrapes.jsonl") scrapes)"
