#!/usr/bin/env bash
# Set up linksweep on a fresh Debian machine with Python 3.11, as root: system packages, a
# virtual environment in .venv, torch pinned (a CPU wheel; an unpinned torch pulls GBs of CUDA
# wheels) and installed BEFORE deepspeed, whose build imports torch.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # libaio-dev: DeepSpeed's async_io op (NVMe offload); iproute2: the emulated cluster (ip, tc);
  # git: provenance (sha); build-essential: DeepSpeed's JIT-built ops.
  apt-get install -y -qq --no-install-recommends libaio-dev iproute2 git build-essential >/dev/null
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip setuptools wheel
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e '.[dev]'
.venv/bin/python -c "import torch, ray, deepspeed, duckdb, transformers, datasets; print('linksweep environment ready: torch', torch.__version__, 'ray', ray.__version__, 'deepspeed', deepspeed.__version__)" 2>&1 | grep -v "real_accelerator"
