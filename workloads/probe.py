"""The per-node probe: what a node has (nvidia-smi topo -m, NVML, torch's CUDA view).

Runs as a Ray task pinned to each node at sweep start (``orchestrator/topology/discovery.py`` asks
``orchestrator/raycluster/nodes.py`` to run ``probe_node`` everywhere) and returns a
``contract.NodeReport``. Never raises. Imports nothing from ``orchestrator``.

The torch part runs in a child process (``_CUDA_PROBE``), for two reasons. Ray may restrict
``CUDA_VISIBLE_DEVICES`` in a task (always for GPU tasks; for ``num_gpus=0`` tasks where
``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1`` or on older Rays), and the probe must see every GPU of
the node. And a CUDA context created in a Ray worker lives as long as that (reused) worker,
holding a few hundred MB on every GPU during the benchmark. The child drops
``CUDA_VISIBLE_DEVICES`` and sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so P2P index ``i`` is NVML's
and ``nvidia-smi``'s ``GPU<i>`` (CUDA's default order is fastest-first, which is not).
Cost: one ``import torch`` per node (~2 s), once per sweep.

May import: contract, telemetry, pynvml.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from typing import Any

from workloads.contract import NodeReport
from workloads.telemetry import nvml_available, nvml_inventory

CUDA_PROBE_TIMEOUT_S = 90.0  # import torch + cuInit on a cold node with 8 GPUs stays well under
TOPO_TIMEOUT_S = 20.0  # nvidia-smi topo -m answers in < 1 s; minutes mean a hung driver
QUERY_TIMEOUT_S = 60.0  # nvidia-smi -q reads every field of every GPU: seconds on 8 GPUs
NVIDIA_SMI_CAPTURES = (
    ("nvidia-smi topo -m", ("topo", "-m"), TOPO_TIMEOUT_S),
    ("nvidia-smi -q", ("-q",), QUERY_TIMEOUT_S),
)
"""The raw captures ``linksweep selftest`` keeps per node: name, arguments, timeout."""


# ---------------------------------------------------------------------------------------------
# The probe: runs on each node as a Ray task. Never raises.
# ---------------------------------------------------------------------------------------------

# Runs in a child process with CUDA_VISIBLE_DEVICES removed and CUDA_DEVICE_ORDER=PCI_BUS_ID;
# prints one JSON object. Self-contained so it needs nothing but torch on the node.
_CUDA_PROBE = r"""
import json
out = {"cuda_available": False, "cuda_device_count": 0, "p2p": None, "nccl_version": None,
       "torch_version": None, "torch_cuda": None, "cuda_status": "ok"}
try:
    import torch
except Exception as exc:
    out["cuda_status"] = f"cannot import torch: {type(exc).__name__}: {exc}"
    print(json.dumps(out)); raise SystemExit(0)
out["torch_version"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
if not torch.cuda.is_available():
    out["cuda_status"] = f"CUDA not available to torch {torch.__version__}"
    print(json.dumps(out)); raise SystemExit(0)
n = torch.cuda.device_count()
out["cuda_available"] = True
out["cuda_device_count"] = n
# bf16 in hardware from compute capability 8.0 (Ampere); V100/T4 only emulate it, which
# torch.cuda.is_bf16_supported() counts as support unless including_emulation=False
out["bf16_native"] = bool(torch.version.hip) or all(
    torch.cuda.get_device_capability(i)[0] >= 8 for i in range(n))
try:
    out["p2p"] = [[None if i == j else bool(torch.cuda.can_device_access_peer(i, j))
                   for j in range(n)] for i in range(n)]
except Exception as exc:
    out["cuda_status"] = f"can_device_access_peer failed: {type(exc).__name__}: {exc}"
try:
    v = torch.cuda.nccl.version()
    out["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
except Exception:
    pass
print(json.dumps(out))
"""


def _cuda_probe(timeout_s: float = CUDA_PROBE_TIMEOUT_S) -> dict:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CUDA_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"cuda_status": f"CUDA probe failed: {type(exc).__name__}: {exc}"}
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return {"cuda_status": f"CUDA probe exited {proc.returncode}: {tail[-1] if tail else ''}"}


def _nvml_versions() -> tuple[str | None, str | None]:
    """Driver version and the CUDA version it supports (``12040`` -> ``"12.4"``)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        try:
            code = int(pynvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{code // 1000}.{(code % 1000) // 10}"
        except pynvml.NVMLError:
            cuda = None
        return driver, cuda
    finally:
        pynvml.nvmlShutdown()


def probe_node() -> NodeReport:
    """Everything discovery wants to know about the node this runs on.

    Runs as a Ray task on the node (``orchestrator.topology.discovery.discover_nodes``); never raises:
    each part that fails leaves its fields at their defaults and says why in its ``*_status``
    field. ``node_id``, ``ip``, ``cpus`` and ``gpus`` are the driver's to fill in (Ray's view).
    """
    out: dict[str, Any] = {"hostname": socket.gethostname()}
    text, why = read_topo_text(timeout_s=TOPO_TIMEOUT_S)
    out["topo_text"], out["topo_status"] = text, why

    ok, status = nvml_available()
    out["nvml_ok"], out["nvml_status"] = ok, status
    if ok:
        try:
            out["inventory"] = nvml_inventory()
        except Exception as exc:  # noqa: BLE001 - NVML answered once; report, don't fail
            out["nvml_ok"] = False
            out["nvml_status"] = f"nvml_inventory failed: {type(exc).__name__}: {exc}"
        with contextlib.suppress(Exception):  # versions are context, not essential
            out["driver_version"], out["cuda_version"] = _nvml_versions()

    out.update(_cuda_probe())
    return NodeReport(node_id="", **out)


def capture_nvidia_smi() -> tuple[str, dict[str, dict[str, str | None]]]:
    """Every :data:`NVIDIA_SMI_CAPTURES` run here, verbatim: this node's hostname (as
    :func:`probe_node` reports it) and name -> ``{"text": stdout and stderr or None, "status":
    "ok" or why not}``; never raises. Runs as a Ray task on each node
    (``orchestrator.topology.discovery.capture_on_every_node``): the GPUs are on the nodes, and the
    machine running ``selftest`` is often a GPU-less head. Kept apart from :func:`probe_node`
    because ``-q`` is long (tens of KB per GPU) and only the selftest keeps it."""
    exe = shutil.which("nvidia-smi")
    out: dict[str, dict[str, str | None]] = {}
    for name, argv, timeout_s in NVIDIA_SMI_CAPTURES:
        if exe is None:
            out[name] = {"text": None, "status": "nvidia-smi not found on PATH"}
            continue
        try:
            p = subprocess.run(
                [exe, *argv], capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            out[name] = {"text": None, "status": f"{type(exc).__name__}: {exc}"}
            continue
        status = "ok" if p.returncode == 0 else f"exit {p.returncode}"
        out[name] = {"text": p.stdout + p.stderr, "status": status}
    return socket.gethostname(), out


def read_topo_text(timeout_s: float = 10.0) -> tuple[str | None, str]:
    """Run ``nvidia-smi topo -m`` here: ``(text, "ok")`` or ``(None, why not)``; never raises."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found on PATH (no NVIDIA driver on this node)"
    try:
        proc = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi topo -m failed: {type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"nvidia-smi topo -m exited {proc.returncode}: {detail[-1] if detail else ''}"
    return proc.stdout, "ok"
