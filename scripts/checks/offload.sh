#!/usr/bin/env bash
# What tests/checks/test_offload.py needs: DeepSpeed's cpu_adam (ZeRO's offloaded optimizer) and
# async_io (NVMe offload) ops, built into .venv's extensions cache as scripts/setup.sh builds them
# (the quickstart's setup leaves both for their first use: about 4 min on 2 cores; nothing when
# they are built). async_io needs libaio-dev (setup.sh's apt line): without it the NVMe test skips
# with the reason.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/python scripts/deepspeed_ops.py --missing async_io cpu_adam 2>&1 | grep -v real_accelerator || true
