"""Simulated hardware profiles: a whole cluster's GPUs, faked together from one description.

A GPU decision is right or wrong only next to the others a node makes: linksweep putting two
ranks on ``cuda:0`` is right alone and wrong beside DeepSpeed picking ``cuda:1`` from
``LOCAL_RANK``. So a :class:`Profile` describes each node once (its GPUs, what Ray advertises,
the ``CUDA_VISIBLE_DEVICES`` its raylet started with, its driver, nvidia-smi, toolkit) and
:func:`installed` fakes, from that one description, every boundary linksweep reads; everything
between them is linksweep's real code. The boundaries, and nothing else:

- torch's CUDA view and DeepSpeed's accelerator (``tests/unit/fake_cuda.py``): device count,
  names, capability, bf16 with and without emulation, ``set_device``, from the
  ``CUDA_VISIBLE_DEVICES`` the process had when CUDA started in it (``cuInit``), fixed from then
  on as the driver fixes it; each :meth:`Cluster.on` is a new process, with its own view;
  a tensor asked for on ``cuda:k`` is made on the CPU once the view has checked ``k``
  (``fake_cuda.CudaTensorsOnCpu``), and GPU ``k`` is busy until the process ends;
- NVML (``pynvml``): ``fake_cuda.ProfileNvml`` (``tests/unit/fake_nvml.FakeNvml``) per node,
  with MIG, old drivers and refused readings as the profile says; an idle GPU's PCIe
  generation reads lower than the one its link trained at, a busy GPU's reads the trained one;
- ``nvidia-smi``: an executable on ``PATH`` printing a real public capture of ``nvidia-smi
  topo -m`` (``shared/data`` beside the checkout, see its SOURCES.md; a one-GPU node's matrix is constructed,
  :data:`ONE_GPU`; ``-q`` prints a two-line stand-in), absent where the node has none;
- the CUDA probe's child process (``workloads/probe.py`` runs ``sys.executable -c``): its code
  runs in this process, under the child's environment, against the node's CUDA view;
- Ray: ``ray.nodes()`` (what ``raycluster.nodes.alive_nodes`` reads), tasks pinned to a node
  (``ray.remote`` / ``wait`` / ``get`` run the function with that node's view installed),
  ``ray.get_gpu_ids`` and the runtime context of a rank;
- what building DeepSpeed's async_io reads (``CUDA_HOME``, ninja, DeepSpeed's libaio probe);
- the world process group FSDP2's ``DeviceMesh`` asks for (:func:`fsdp2_device`): its device
  choice itself is torch's own code, run against the node's CUDA view.

Ray is reached through the module object ``orchestrator.raycluster.nodes`` already imported;
unit tests never start it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import socket
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch

from tests.captures import SHARED_DATA
from tests.unit.fake_cuda import CudaTensorsOnCpu, CudaView, NoNvml, nvml_for
from tests.unit.fake_nvml import FakeNvml

DATA = SHARED_DATA


@dataclass(frozen=True)
class Gpu:
    name: str
    """What NVML and torch call the GPU (``nvidia-smi --query-gpu=name``)."""
    capability: tuple[int, int]
    mig: tuple[str, ...] = ()
    """MIG instance UUIDs when the GPU is in MIG mode."""
    mig_profile: str = ""
    """The instances' profile (``1g.10gb``): torch names a MIG device "<GPU> MIG <profile>"."""


@dataclass(frozen=True)
class Aio:
    """What building DeepSpeed's async_io finds on a node."""

    libaio: bool = True
    ninja: bool = True
    cuda_home: str | None = "/usr/local/cuda"
    nvcc: bool = True


@dataclass(frozen=True)
class Node:
    hostname: str
    ip: str
    cpus: float
    gpus: tuple[Gpu, ...] = ()
    raylet_cvd: str | None = None
    """``CUDA_VISIBLE_DEVICES`` the raylet started with: Ray's GPUs are its entries."""
    topo: str | None = None
    """A capture of ``nvidia-smi topo -m`` under DATA; None: nvidia-smi absent on the node."""
    nvml_driver: str = "new"
    nvml_no_permission: bool = False
    nvml_refused: tuple[str, ...] = ()
    """FakeNvml keys whose NVML call answers NoPermission on every GPU (a container allowed to
    sample but not to read power limits)."""
    aio: Aio = field(default_factory=Aio)

    @property
    def node_id(self) -> str:
        """56 hex digits, as Ray's (its scheduling strategies check the form)."""
        return f"{zlib.crc32(self.hostname.encode()):08x}" * 7

    @property
    def ray_gpu_ids(self) -> tuple[str, ...]:
        """The GPU ids Ray hands out: the raylet's CUDA_VISIBLE_DEVICES, else 0..n-1."""
        if self.raylet_cvd is not None:
            return tuple(x for x in self.raylet_cvd.split(",") if x)
        return tuple(str(i) for i in range(len(self.gpus)))

    def uuid(self, i: int) -> str:
        return f"GPU-{zlib.crc32(self.hostname.encode()):08x}-{i:04d}-0000-0000-000000000000"

    def devices(self, cvd: str | None) -> list[tuple[Gpu, str, str]]:
        """What CUDA enumerates under ``cvd``: (gpu, torch's name, NVML id) per device. Unset: every
        GPU (a GPU in MIG mode shows its first instance: CUDA enumerates one MIG device); an
        entry CUDA does not know ends the list, as in the CUDA runtime."""
        if cvd is None:
            out = []
            for i, g in enumerate(self.gpus):
                out.append(self._mig_device(g, g.mig[0]) if g.mig else (g, g.name, str(i)))
            return out
        out = []
        for entry in (e.strip() for e in cvd.split(",") if e.strip()):
            found = None
            for i, g in enumerate(self.gpus):
                if entry == str(i) or entry == self.uuid(i):
                    found = (g, g.name, str(i)) if not g.mig else None
                elif entry in g.mig:
                    found = self._mig_device(g, entry)
            if found is None:
                break
            out.append(found)
        return out

    @staticmethod
    def _mig_device(g: Gpu, mig_id: str) -> tuple[Gpu, str, str]:
        return g, f"{g.name} MIG {g.mig_profile}", mig_id

    def nvml_gpus(self) -> list[dict]:
        """FakeNvml's GPU dicts: the physical GPUs (NVML counts a MIG-mode GPU once)."""
        return [
            {
                "name": g.name,
                "uuid": self.uuid(i),
                "mig": list(g.mig),
                "mig_profile": g.mig_profile,
                "bus_id": f"00000000:{0x18 + i:02X}:00.0",
                "mem_bytes": 80 * 10**9,
                "temps": [40, 41, 42],
                "power_mw": 250_000,
                "sm_mhz": 1400,
                "sm_max_mhz": 1410,
                "reasons": 0x1,
                "violations": {0: [0], 1: [0]},
                "gen": 4,
                "gen_max": 4,
                "width": 16,
                "width_max": 16,
                "limit_mw": 300_000,
                "default_limit_mw": 300_000,
                "nvlink": None,
                "ecc": {"uncorrected": 0, "corrected": 0},
            }
            | {
                k: FakeNvml.NVMLError_NoPermission("Insufficient Permissions")
                for k in self.nvml_refused
            }
            for i, g in enumerate(self.gpus)
        ]


@dataclass(frozen=True)
class Profile:
    name: str
    nodes: tuple[Node, ...]
    driver: str
    """Hostname of the node that runs ``linksweep`` (the head, on a cluster)."""
    driver_cvd: str | None = None
    """``CUDA_VISIBLE_DEVICES`` the user gave the linksweep command."""

    def node(self, hostname: str) -> Node:
        return next(n for n in self.nodes if n.hostname == hostname)

    @property
    def gpu_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.ray_gpu_ids]


ONE_GPU = "constructed:one-gpu"
"""No public capture of a one-GPU node's ``nvidia-smi topo -m`` is stored: this names the text
below, built in the captures' layout (header, the GPU's row, the legend's first lines)."""
ONE_GPU_TEXT = (
    "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \t0-3\t0\t\tN/A\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
)


def _topo_path(node: Node, tmp: Path | None = None) -> Path | None:
    if node.topo is None:
        return None
    if node.topo == ONE_GPU:
        if tmp is None:
            return None
        path = tmp / "one-gpu-topo.txt"
        path.write_text(ONE_GPU_TEXT)
        return path
    return DATA / node.topo


def captures_missing(profile: Profile) -> list[str]:
    """Captures a profile reads that are not on this machine (the test skips, saying which)."""
    return [str(p) for n in profile.nodes if (p := _topo_path(n)) and not p.exists()]


# -- one node's process view ----------------------------------------------------------------


CHILD_PYTHON = "/simulated/bin/python"
"""``sys.executable`` on a simulated node: a child process started with it runs its ``-c`` code
in this process (:func:`_child_python`), where torch's CUDA view is the node's."""


def _child_python(argv: list[str], env: dict | None) -> subprocess.CompletedProcess:
    """``python -c CODE`` on the node: CODE (``workloads/probe.py``'s CUDA probe, unchanged)
    runs here under the child's environment (the probe drops CUDA_VISIBLE_DEVICES), its
    stdout captured as the child's."""
    saved = dict(os.environ)
    out = io.StringIO()
    code = 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        with contextlib.redirect_stdout(out):
            exec(compile(argv[2], "<child -c>", "exec"), {"__name__": "__main__"})  # noqa: S102
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), "")


class _Ref:
    """An object ref whose task has finished (hashable, as Ray's are)."""

    def __init__(self, value):
        self.value = value


class Cluster:
    """A profile installed: :meth:`on` a node gives a process there its view."""

    def __init__(self, profile: Profile, mp, tmp: Path):
        self.profile = profile
        self.mp = mp
        self.tmp = tmp
        self.views: dict[str, CudaView] = {}
        """Per node, the CUDA view of the last process started there."""
        self.busy: dict[str, set[int]] = {n.hostname: set() for n in profile.nodes}
        """Per node, the NVML indices of its GPUs under load (every process there sees them)."""

    def _bin(self, node: Node) -> Path:
        """The node's PATH folder: nvidia-smi, when it has one."""
        folder = self.tmp / node.hostname
        if folder.exists():
            return folder
        folder.mkdir(parents=True)
        path = _topo_path(node, self.tmp)
        if path is not None:
            smi = folder / "nvidia-smi"
            smi.write_text(
                "#!/bin/sh\n"
                f'if [ "$1" = topo ]; then cat {path}; exit 0; fi\n'
                f'echo "==============NVSMI LOG==============" ; echo "Attached GPUs : '
                f'{len(node.gpus)}"\n'
            )
            smi.chmod(0o755)
        return folder

    @contextlib.contextmanager
    def on(self, hostname: str, cvd: str | None = None):
        """A new process on ``hostname`` with ``CUDA_VISIBLE_DEVICES=cvd`` (None: unset); its
        environment, torch, NVML, PATH, hostname and async_io facts are the node's. CUDA has
        not started in it: its first CUDA call fixes what it sees."""
        node = self.profile.node(hostname)
        busy = self.busy[hostname]
        view = self.views[hostname] = CudaView(node, busy)
        folder = self._bin(node)
        saved_env = dict(os.environ)
        with contextlib.ExitStack() as stack:
            import _pytest.monkeypatch

            mp = stack.enter_context(_pytest.monkeypatch.MonkeyPatch.context())
            # DeepSpeed first: its first import runs get_accelerator, whose
            # "device_count() > 0 and is_available()" would start CUDA in this process before the
            # code under test sets CUDA_VISIBLE_DEVICES (a rank imports DeepSpeed after that)
            self._install_aio(mp, node)
            view.install(mp)
            mp.setitem(sys.modules, "pynvml", nvml_for(node, busy) if node.gpus else NoNvml())
            mp.setenv("PATH", f"{folder}:/usr/bin:/bin")
            if cvd is None:
                mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
            else:
                mp.setenv("CUDA_VISIBLE_DEVICES", cvd)
            mp.setattr(sys, "executable", CHILD_PYTHON)
            real_run = subprocess.run

            def run(argv, *args, env=None, **kwargs):
                if list(argv[:2]) == [CHILD_PYTHON, "-c"]:
                    return self._child(node, argv, env)
                return real_run(argv, *args, env=env, **kwargs)

            mp.setattr(subprocess, "run", run)
            mp.setattr(socket, "gethostname", lambda: hostname)
            stack.enter_context(CudaTensorsOnCpu(view))
            try:
                yield view
            finally:
                view.reset()  # the process ends: its GPUs are idle again
                os.environ.clear()
                os.environ.update(saved_env)

    def _child(self, node: Node, argv: list[str], env: dict | None):
        """A child process on ``node``: its own CUDA view, started by nothing yet."""
        import _pytest.monkeypatch

        child = CudaView(node, self.busy[node.hostname])
        with _pytest.monkeypatch.MonkeyPatch.context() as mp:
            child.install(mp)
            with CudaTensorsOnCpu(child):
                try:
                    return _child_python(argv, env)
                finally:
                    child.reset()

    @staticmethod
    def _install_aio(mp, node: Node) -> None:
        import torch.utils.cpp_extension as cpp_ext
        from deepspeed.ops.op_builder import AsyncIOBuilder

        mp.setattr(cpp_ext, "CUDA_HOME", node.aio.cuda_home if node.gpus else None)
        mp.setattr(cpp_ext, "is_ninja_available", lambda: node.aio.ninja)
        mp.setattr(AsyncIOBuilder, "has_function", lambda self, *a, **k: node.aio.libaio)
        real_access = os.access

        def access(path, mode, *a, **k):
            if str(path).endswith("/bin/nvcc"):
                return node.aio.nvcc and node.aio.cuda_home is not None
            return real_access(path, mode, *a, **k)

        mp.setattr(os, "access", access)

    # -- Ray --------------------------------------------------------------------------------

    def ray_nodes(self) -> list[dict]:
        """``ray.nodes()`` as Ray 2.60 returns it for this profile."""
        out = []
        for n in self.profile.nodes:
            resources = {"CPU": n.cpus} if n.cpus else {}
            if n.ray_gpu_ids:
                resources["GPU"] = float(len(n.ray_gpu_ids))
            resources[f"node:{n.ip}"] = 1.0
            out.append(
                {
                    "NodeID": n.node_id,
                    "Alive": True,
                    "NodeManagerHostname": n.hostname,
                    "NodeManagerAddress": n.ip,
                    "Resources": resources,
                }
            )
        return out

    def install_ray(self) -> None:
        """Ray's node table, and tasks pinned to a node run there at once (``ray.remote``)."""
        nodes_mod = importlib.import_module("orchestrator.raycluster.nodes")
        ray = nodes_mod.ray
        cluster = self

        class Remote:
            def __init__(self, fn, node_id=None):
                self.fn, self.node_id = fn, node_id

            def options(self, scheduling_strategy=None, **_):
                return Remote(self.fn, scheduling_strategy.node_id)

            def remote(self, *args):
                node = next(n for n in cluster.profile.nodes if n.node_id == self.node_id)
                with cluster.on(node.hostname, node.raylet_cvd):
                    return _Ref(self.fn(*args))

        def remote(*args, **kwargs):
            if args and callable(args[0]):
                return Remote(args[0])
            return lambda fn: Remote(fn)

        self.mp.setattr(ray, "nodes", self.ray_nodes)
        self.mp.setattr(ray, "remote", remote)
        self.mp.setattr(ray, "wait", lambda refs, **k: (list(refs), []))
        self.mp.setattr(ray, "get", lambda ref, **k: ref.value)
        self.mp.setattr(ray, "cancel", lambda *a, **k: None)

    def ray_worker(self, node: Node, gpu_ids: tuple[str, ...]):
        """The Ray calls a rank actor on ``node`` makes (``workloads/rank.py``), with the GPU ids
        Ray assigned it; returns the ray module to patch around it."""
        ray = importlib.import_module("orchestrator.raycluster.nodes").ray
        self.mp.setattr(ray, "get_gpu_ids", lambda: list(gpu_ids))
        ctx = SimpleNamespace(get_node_id=lambda: node.node_id)
        self.mp.setattr(ray, "get_runtime_context", lambda: ctx)
        self.mp.setattr(ray.util, "get_node_ip_address", lambda: node.ip)


@contextlib.contextmanager
def installed(profile: Profile, mp, tmp: Path):
    """The profile's cluster, Ray included, for one test; restored by ``mp`` after it."""
    cluster = Cluster(profile, mp, tmp)
    cluster.install_ray()
    threads = torch.get_num_threads()  # a rank sets its thread count (decide_device)
    try:
        yield cluster
    finally:
        torch.set_num_threads(threads)


# -- FSDP2's device ---------------------------------------------------------------------------


def fsdp2_device(world_size: int, rank: int, device_type: str, cuda_initialized: bool) -> str:
    """The device FSDP2's ``init_device_mesh`` leaves this process on, in its environment now:
    torch 2.13's real ``DeviceMesh._setup_world_group_and_device`` (``device_mesh.py``), with
    only the world group faked (initialised, ``world_size`` ranks, this ``rank``, NCCL).

    Its rule: where CUDA is initialised already it keeps the current device; else it calls
    ``set_device(int(LOCAL_RANK))``; without LOCAL_RANK, ``rank % device_count``.
    ``cuda_initialized``: which branch runs (True: CUDA was initialised when the rank set its
    device in ``decide_device``; False: nothing had touched CUDA yet, LOCAL_RANK decides). The
    tests ask both, so the answer does not hang on which one a real rank meets.

    Returns ``cuda:N`` (the device it set, or the one it kept), ``cpu`` for a CPU mesh (torch
    sets no device there), or ``error: ...`` where the device it asks for is not visible
    ("invalid device ordinal", as CUDA says)."""
    from torch.distributed import device_mesh
    from torch.distributed._mesh_layout import _MeshLayout

    if device_type == "cpu":
        return "cpu"
    mesh = device_mesh.DeviceMesh.__new__(device_mesh.DeviceMesh)
    mesh._device_type = device_type
    mesh._layout = _MeshLayout.from_sizes_strides((world_size,))
    asked: list[int] = []
    view_set_device = torch.cuda.set_device
    import _pytest.monkeypatch

    with _pytest.monkeypatch.MonkeyPatch.context() as mp:
        mp.setattr(device_mesh, "is_initialized", lambda: True)
        mp.setattr(device_mesh, "get_world_size", lambda *a, **k: world_size)
        mp.setattr(device_mesh, "get_rank", lambda *a, **k: rank)
        mp.setattr(device_mesh, "get_backend", lambda *a, **k: "nccl")
        mp.setattr(device_mesh, "_get_default_group", lambda: None)
        mp.setattr(torch.cuda, "is_initialized", lambda: cuda_initialized)

        def set_device(device) -> None:
            asked.append(int(device))
            view_set_device(device)

        mp.setattr(torch.cuda, "set_device", set_device)
        try:
            mesh._setup_world_group_and_device()
        except RuntimeError as exc:
            return f"error: set_device({asked[-1] if asked else '?'}): {exc}"
    if asked:
        return f"cuda:{asked[-1]}"
    return f"cuda:{torch.cuda.current_device()}"


# -- the profiles ---------------------------------------------------------------------------

A100_PCIE = Gpu("NVIDIA A100 80GB PCIe", (8, 0))
A100_SXM = Gpu("NVIDIA A100-SXM4-80GB", (8, 0))
H100_SXM = Gpu("NVIDIA H100 80GB HBM3", (9, 0))
A10G = Gpu("NVIDIA A10G", (8, 6))
V100 = Gpu("Tesla V100-SXM2-16GB", (7, 0))
L4 = Gpu("NVIDIA L4", (8, 9))
A10 = Gpu("NVIDIA A10", (8, 6))
UNKNOWN = Gpu("NVIDIA Graphics Device", (10, 0))
"""What NVML calls a GPU its driver has no name for (a pre-release board)."""
MIG_ID = "MIG-3f5c1d2e-0000-5a6b-8c9d-0123456789ab"
A100_MIG = Gpu("NVIDIA A100-SXM4-80GB", (8, 0), mig=(MIG_ID,), mig_profile="1g.10gb")
H100_TOPO = "corpus/topo/07_8gpu-h100-sxm-nv18_8nic-legend_gpu-numa-id.txt"
NO_TOOLKIT = Aio(cuda_home=None, nvcc=False)
"""A GPU node with the driver and pip torch's CUDA libraries only: no nvcc."""
NO_LIBAIO = Aio(libaio=False, cuda_home=None, nvcc=False)


def _h100(cvd: str | None = None) -> Profile:
    node = Node("h100-0", "10.1.0.2", 192, (H100_SXM,) * 8, cvd, H100_TOPO, aio=NO_TOOLKIT)
    name = "h100x8" if cvd is None else "h100x8-cvd0"
    return Profile(name, (node,), "h100-0", driver_cvd=cvd)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(  # clusters/aws-gpu.yaml: an m5 head runs linksweep, a g5.xlarge the ranks
            "a10g-gpuless-head",
            (
                Node("ip-10-0-0-10", "10.0.0.10", 8, aio=NO_LIBAIO),
                Node("ip-10-0-1-20", "10.0.1.20", 4, (A10G,), topo=ONE_GPU),
            ),
            "ip-10-0-0-10",
        ),
        Profile(  # PCIe through the host bridge: the capture is two TITAN RTX, the same matrix
            "a100-pcie-x2",
            (
                Node(
                    "a100p-0",
                    "10.2.0.2",
                    64,
                    (A100_PCIE,) * 2,
                    topo="captures/topo/hf_perf_hardware_phb.txt",
                ),
            ),
            "a100p-0",
        ),
        _h100(),
        _h100("0"),
        Profile(  # Ray started with CUDA_VISIBLE_DEVICES=2,3: its GPU ids are not 0-based
            "a10x4-cvd23",
            (
                Node(
                    "a10-0",
                    "10.9.0.2",
                    32,
                    (A10,) * 4,
                    "2,3",
                    "corpus/topo/12_4gpu-a10-pcie-sys_2nic-legend.txt",
                ),
            ),
            "a10-0",
            driver_cvd="2,3",
        ),
        Profile(  # one 1g.10gb instance given to the raylet by its MIG UUID
            "a100-mig-1g",
            (Node("mig-0", "10.3.0.2", 8, (A100_MIG,), MIG_ID, ONE_GPU),),
            "mig-0",
        ),
        Profile(  # a DGX-1 with a driver from before the clock-event reason calls
            "v100x8",
            (
                Node(
                    "dgx1-0",
                    "10.4.0.2",
                    80,
                    (V100,) * 8,
                    None,
                    "corpus/topo/05_dgx1-v100-hybrid-cube-mesh_4x-mlx5_tabs.txt",
                    nvml_driver="ancient",
                ),
            ),
            "dgx1-0",
        ),
        Profile(
            "unknown-gpu",
            (Node("proto-0", "10.5.0.2", 16, (UNKNOWN,), topo=ONE_GPU),),
            "proto-0",
        ),
        Profile(  # a CPU head and CPU worker beside two 8xA100 nodes
            "mixed-cpu-a100",
            (
                Node("head-0", "10.6.0.1", 8, aio=NO_LIBAIO),
                Node("cpu-1", "10.6.0.2", 32),
                Node(
                    "a100-1",
                    "10.6.0.3",
                    96,
                    (A100_SXM,) * 8,
                    topo="corpus/topo/06_8gpu-a100-sxm-nv12_10nic-legend_tabs.txt",
                ),
                Node(
                    "a100-2",
                    "10.6.0.4",
                    96,
                    (A100_SXM,) * 8,
                    topo="corpus/topo/06_8gpu-a100-sxm-nv12_10nic-legend_tabs.txt",
                ),
            ),
            "head-0",
        ),
        Profile(  # clusters/kuberay-gpu.yaml: a head pod with 0 CPUs, 0 GPUs, no nvidia-smi
            "kuberay-no-smi-driver",
            (
                Node("head-pod", "10.7.0.1", 0, aio=NO_LIBAIO),
                Node(
                    "gpu-pod",
                    "10.7.0.2",
                    8,
                    (L4,) * 2,
                    topo="corpus/topo/03_2gpu-gtx1080ti-pcie-phb.txt",
                    nvml_refused=("limit_mw", "default_limit_mw"),  # a pod may not read them
                ),
            ),
            "head-pod",
        ),
        Profile(  # the CPU path: two CPU nodes, no GPU anywhere
            "cpu-only",
            (Node("cpu-a", "10.8.0.1", 4), Node("cpu-b", "10.8.0.2", 4)),
            "cpu-a",
        ),
    )
}
