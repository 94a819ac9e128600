#!/usr/bin/env bash
# What tests/checks/test_selftest.py needs: the DeepSpeed ops of the CPU selftest's NVMe check
# (async_io, cpu_adam), the offload check's install.
set -euo pipefail
exec bash "$(dirname "$0")/offload.sh"
