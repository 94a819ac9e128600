#!/usr/bin/env bash
# The README's first command: set up, then run the quickstart sweep end to end and print the
# summary table. Results land in ./results.duckdb.
#
# Where it can (root and `ip netns`), the quickstart runs on an emulated 2-node cluster whose
# `slow` link is shaped with tc, so the slowdowns it prints are real; otherwise it says so and
# runs sweeps/quickstart.yaml on a single-node embedded Ray, where every link is loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the DeepSpeed op its sweep uses: the others (NVMe offload's async_io, ~3 min on 2 cores;
# cpu_adam, under 1 min) wait for their first use: a sweep's first run that needs one builds it,
# within its run timeout; the test suite needs neither (the checks that do build them first:
# scripts/checks/offload.sh).
LINKSWEEP_SETUP_OPS=quickstart bash scripts/setup.sh
LS=.venv/bin/linksweep

emulated_ok() {
  [ "$(id -u)" = 0 ] || { echo "not root"; return 1; }
  command -v ip >/dev/null || { echo "ip (iproute2) not installed"; return 1; }
  ip netns add lsqs-probe 2>/dev/null || { echo "ip netns unavailable here"; return 1; }
  ip netns del lsqs-probe
}

if why=$(emulated_ok); then
  echo "quickstart: emulated 2-node cluster (network namespaces; links fast=unshaped, slow=500mbit)"
  $LS cluster up --emulated --nodes 2 --link fast --link slow=500mbit | tee /tmp/linksweep-quickstart-up.log
  addr=$(grep '^RAY_ADDRESS=' /tmp/linksweep-quickstart-up.log | cut -d= -f2)
  trap '$LS cluster down --emulated >/dev/null' EXIT
  $LS run sweeps/quickstart-emulated.yaml --address "$addr" --db results.duckdb
else
  echo "quickstart: falling back to a single-node embedded Ray ($why): every link variant shares"
  echo "this machine's loopback, so slowdowns read about 1.00. Run as root for the emulated cluster."
  $LS run sweeps/quickstart.yaml --db results.duckdb
fi
