#!/usr/bin/env bash
# Regenerate docs/report-first-screen.png (the report's first screen, as headless Chromium draws
# it at 1280x1000) and docs/quickstart-slowdown.png (the report's slowdown figure) from a
# results database, by default the quickstart's ./results.duckdb.
#
#   bash scripts/screenshot.sh [DB] [SWEEP_ID]
#
# Needs Debian's chromium (apt-get install -y chromium). Runs as root too (--no-sandbox).
set -euo pipefail
cd "$(dirname "$0")/.."
DB=${1:-results.duckdb}
SWEEP=${2:-}
BROWSER=$(command -v chromium || command -v chromium-browser || true)
[ -n "$BROWSER" ] || { echo "chromium not found: apt-get install -y chromium" >&2; exit 2; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# `python -m` runs this checkout's code (cwd first on sys.path), whatever .venv points at.
.venv/bin/python -m orchestrator report --db "$DB" --out "$OUT" ${SWEEP:+--sweep "$SWEEP"}
mkdir -p docs
"$BROWSER" --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size=1280,1000 --screenshot="$OUT/first-screen.png" "file://$OUT/report.html" \
  >/dev/null 2>&1
cp "$OUT/first-screen.png" docs/report-first-screen.png
cp "$OUT/slowdown_vs_grad_accum.png" docs/quickstart-slowdown.png
echo "wrote docs/report-first-screen.png and docs/quickstart-slowdown.png from $DB"
