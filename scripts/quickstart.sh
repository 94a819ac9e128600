#!/usr/bin/env bash
# The README's first command: set up, then run sweeps/quickstart.yaml end to end and print the
# summary table. Results land in ./results.duckdb.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/linksweep run sweeps/quickstart.yaml --db results.duckdb
