#!/usr/bin/env bash
# Set up linksweep on a fresh Debian machine with Python 3.11, as root: system packages, a
# virtual environment in .venv, torch pinned (a CPU wheel; an unpinned torch pulls GBs of CUDA
# wheels) and installed BEFORE deepspeed, whose build imports torch.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step's seconds, so a slow setup says where its time went.
t0=$SECONDS
step() { echo "setup: $1 done in $((SECONDS - t0)) s"; t0=$SECONDS; }

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # libaio-dev: DeepSpeed's async_io op (NVMe offload); iproute2: the emulated cluster (ip, tc);
  # git: provenance (sha); build-essential: DeepSpeed's JIT-built ops.
  apt-get install -y -qq --no-install-recommends libaio-dev iproute2 git build-essential >/dev/null
fi
step "system packages"

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
step "venv and torch"
.venv/bin/python -m pip install -q -e '.[dev]'
# The test that a trace reader this project did not write (Meta's HolisticTraceAnalysis) loads
# the rebased per-rank traces: HTA 0.5.0 asks for jupyterlab, which that reading never imports,
# so it comes without its dependencies, beside the three it does import (pyproject's `hta` extra).
.venv/bin/python -m pip install -q --no-deps "HolisticTraceAnalysis==0.5.0" "plotly>=5.11" \
  "pydot>=1.3" "narwhals>=1.15"
step "linksweep and its dependencies"

# DeepSpeed JIT-builds its C++ ops where they are first used, inside the rank processes: async_io
# and pin_memory at the first NVMe-offload run (~6 min on 2 cores), cpu_adam at the first run
# that offloads ZeRO's optimizer (~70 s), deepspeed_shm_comm at the first ZeRO run on CPU
# (~35 s). Build them here, with the venv's Python and torch, into the cache the ranks load them
# from (scripts/deepspeed_ops.py). An op this machine cannot build (async_io without libaio-dev)
# is skipped with the reason; it never fails the setup.
# That cache is this venv's own, .venv/torch_extensions: torch reads TORCH_EXTENSIONS_DIR in
# every process, and a .pth line sets it (unless already set) in every Python of this venv, so
# the driver, Ray's workers and the ranks all find it. The default, ~/.cache/torch_extensions, is
# shared by every venv of the user: two checkouts compile the same op against their own torch
# headers (another command for ninja), so each rebuilt the other's whenever they took turns
# (async_io: ~6 min), also in the middle of a test run.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf 'import os; os.environ.setdefault("TORCH_EXTENSIONS_DIR", %s)\n' \
  "'$PWD/.venv/torch_extensions'" > "$site/linksweep_torch_extensions.pth"
# LINKSWEEP_SETUP_OPS: which ops (scripts/deepspeed_ops.py's names; the quickstart's setup says
# `quickstart`, the ones its sweep uses: the rest are built by the checks that need them,
# scripts/checks/offload.sh and selftest.sh); default every one.
# shellcheck disable=SC2086
.venv/bin/python scripts/deepspeed_ops.py ${LINKSWEEP_SETUP_OPS:-} 2>&1 \
  | grep -v "real_accelerator" || echo "warning: DeepSpeed ops not prebuilt: the first run that needs one builds it"
step "DeepSpeed ops"
.venv/bin/python -c "import torch, ray, deepspeed, duckdb, transformers, datasets; print('linksweep environment ready: torch', torch.__version__, 'ray', ray.__version__, 'deepspeed', deepspeed.__version__)" 2>&1 | grep -v "real_accelerator"
