#!/usr/bin/env bash
# What tests/checks/test_prometheus.py needs: Debian's prometheus (the server binary; the test
# starts its own on a free loopback port with its own config and data folder, and stops it).
# --no-install-recommends: no prometheus-node-exporter daemon. Idempotent; as root.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends prometheus >/dev/null \
  || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends prometheus >/dev/null; }
prometheus --version 2>&1 | head -1
