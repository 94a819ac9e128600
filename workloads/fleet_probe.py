"""The fleet check's worker side: a node's health, its compute probe, and one all_reduce rank.

One job: what a fleet check runs on a node, kept in one module because one actor
(:class:`FleetRank`) runs both the link measurements and the compute probe.

Runs in Ray workers that ``orchestrator/raycluster/pinned_probes.py`` pins to nodes; every answer is a
frozen record of ``workloads.fleet_contract``. Three jobs, each a plain function or method:

- **Health** (:func:`read_node_health`): per GPU what NVML says now (PCIe generation and width
  now vs max, clock-event reasons, SM clock now vs max, temperature, volatile ECC totals), and
  always the CPU facts (cpus, 1-minute load, available memory). A reading that the GPU, the
  driver or our permissions do not give is None, never an error; the clock reasons go through
  ``workloads.telemetry``'s fallbacks (the new call, the old name of the same bits, else None).
  The NVML module is injectable (``nvml=``), so unit tests pass ``tests/unit/fake_nvml.py``.
- **Compute probe** (:func:`compute_probe`, run by :meth:`FleetRank.compute` on a node's first
  rank after its link's measurements): a fixed short gpt2 training run on one rank, the
  same on every node so nodes compare like with like (:data:`CPU_PROBE`, :data:`GPU_PROBE`):
  synthetic tokens, AdamW, warmup steps excluded, the device synchronised before each clock read;
  tokens/s = micro_batch x seq_len / median step time. On a GPU the node's health is read once,
  from a background thread, while the timed steps run: every GPU is read, and only the probe's
  own GPU is marked ``under_load``. The probe loads one GPU; the others are idle and lower their
  PCIe generation to save power (``workloads/gpu_doctor.py``), so judging them as loaded made
  every multi-GPU node a suspect ("PCIe gen 1 of 5 under load" for seven GPUs of eight).
- **One all_reduce rank** (:class:`FleetRank`, an actor class): joins a process group over a
  ``tcp://`` rendezvous and times ``msg_bytes`` float32 all_reduces with ``workloads.linkbench``
  (the one measurement protocol: warmup, a barrier and a sync around each timed iteration,
  per-iteration times reduced with MAX over ranks). gloo is bound to an interface before the
  group is created (torch 2.13 reads ``GLOO_SOCKET_IFNAME`` when ``ProcessGroupGloo`` is built,
  in ``init_process_group``; checked here: a bad name fails there with "Unable to find address"):
  loopback for ranks inside one node, else the link's own ``GLOO_SOCKET_IFNAME``, else the
  interface that holds the node's Ray IP (:func:`ifname_for_ip`), so traffic between nodes goes
  where Ray's does, not wherever gloo's hostname lookup points.

May import: fleet_contract, device, linkbench, model, rank, telemetry, psutil, pynvml, ray, torch,
transformers.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import statistics
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.fleet_contract import CollectiveTimes, ComputeRecord, HealthRecord

NO_GPU_NOTE = "no GPU: NVML checks do not apply (throttle, PCIe, ECC, clocks); CPU facts recorded"


# --- pure helpers -------------------------------------------------------------------------------


def ifname_for_ip(addrs: Mapping[str, Iterable[Any]], ip: str) -> str | None:
    """The interface holding address ``ip`` in ``psutil.net_if_addrs()``-shaped data (name ->
    entries with ``.address``), or None. Names are tried in sorted order, so the answer is the
    same on every call; an IPv6 zone suffix (``fe80::1%eth0``) is ignored."""
    for name in sorted(addrs):
        for entry in addrs[name]:
            if str(getattr(entry, "address", "")).split("%")[0] == ip:
                return name
    return None


def max_over_ranks(per_rank: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """Per iteration, the slowest rank's time (a collective ends when its last rank ends).
    Raises ValueError when ranks timed different numbers of iterations."""
    if not per_rank:
        return ()
    counts = {len(t) for t in per_rank}
    if len(counts) != 1:
        raise ValueError(f"ranks timed different iteration counts {sorted(counts)}; need one")
    return tuple(max(ts) for ts in zip(*per_rank, strict=True))


def median_s(times_s: Sequence[float]) -> float | None:
    """The median of ``times_s``; None when there are none."""
    return float(statistics.median(times_s)) if times_s else None


def mem_available_bytes(meminfo: str) -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` text (kB, 1024 bytes), or None if absent."""
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "MemAvailable":
            value, *unit = rest.split()
            return int(value) * (1024 if unit and unit[0].lower() == "kb" else 1)
    return None


# --- health -------------------------------------------------------------------------------------


def cpu_facts(meminfo_path: str = "/proc/meminfo") -> dict[str, Any]:
    """cpus this process may run on, the 1-minute load average and available memory (bytes)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    try:
        with open(meminfo_path) as f:
            mem = mem_available_bytes(f.read())
    except OSError:
        mem = None
    return {"cpus": cpus, "loadavg_1m": load, "mem_available_bytes": mem}


def _errors(nvml: Any, *names: str) -> tuple[type[BaseException], ...]:
    return tuple(getattr(nvml, n) for n in names if isinstance(getattr(nvml, n, None), type))


def _text(value: Any) -> str | None:
    return None if value is None else value.decode() if isinstance(value, bytes) else str(value)


def _gpu_facts(nvml: Any, index: int, under_load: bool) -> dict[str, Any]:
    """One GPU's health dict (keys: ``fleet_contract.HealthRecord.gpus``)."""
    from workloads.telemetry import REASON_FNS  # the new reasons call, then its older name

    unanswered = _errors(
        nvml, "NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound"
    )
    facts: dict[str, Any] = {"index": index, "under_load": under_load, "error": None}
    try:
        h = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:  # noqa: BLE001 - no permission, GPU lost: this GPU's answer
        facts["error"] = f"{type(exc).__name__}: {exc}"
        return facts

    def read(fn_name: str, *args: Any) -> Any:
        try:
            return getattr(nvml, fn_name)(h, *args)
        except unanswered:
            return None

    reasons = None
    for fn_name in REASON_FNS:
        if hasattr(nvml, fn_name) and (value := read(fn_name)) is not None:
            reasons = int(value)
            break
    volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    temp = read("nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU)
    facts.update(
        name=_text(read("nvmlDeviceGetName")),
        uuid=_text(read("nvmlDeviceGetUUID")),
        pcie_gen_current=read("nvmlDeviceGetCurrPcieLinkGeneration"),
        pcie_gen_max=read("nvmlDeviceGetMaxPcieLinkGeneration"),
        pcie_width_current=read("nvmlDeviceGetCurrPcieLinkWidth"),
        pcie_width_max=read("nvmlDeviceGetMaxPcieLinkWidth"),
        clock_reasons=reasons,
        sm_clock_mhz=read("nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=read("nvmlDeviceGetMaxClockInfo", nvml.NVML_CLOCK_SM),
        temp_c=None if temp is None else float(temp),
        # NotSupported (ECC off, or a GPU without ECC) -> None, as the record says
        ecc_uncorrected=read(
            "nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile
        ),
        ecc_corrected=read(
            "nvmlDeviceGetTotalEccErrors", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile
        ),
        mig_instances=_mig_instances(nvml, h),
    )
    return facts


def _mig_instances(nvml: Any, handle: Any) -> tuple[str, ...]:
    """NVML's names of the MIG instances of a GPU in MIG mode (``NVIDIA A100-SXM4-80GB MIG
    1g.10gb``); empty when MIG is off or NVML cannot say (an old driver or nvidia-ml-py). A
    rank on such a GPU computes on its instance, not the whole GPU, so the fleet judges it
    among the same instances (``orchestrator/fleet/groups.py``)."""
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        if not current:
            return ()
        names = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:  # an empty slot answers NotFound
                names.append(
                    _text(
                        nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
                    )
                )
            except Exception:  # noqa: BLE001, S112 - this slot holds no instance
                continue
        return tuple(n for n in names if n)
    except Exception:  # noqa: BLE001 - NotSupported (no MIG on this GPU), FunctionNotFound
        return ()


def loaded_indices(nvml: Any, loaded: Collection[str]) -> set[int]:
    """The NVML indices of the GPUs named by ``loaded`` (Ray's GPU ids, as
    ``DeviceDecision.nvml_id``: an index, a UUID, or a MIG instance's id, whose parent GPU is
    the one under load). An id NVML cannot resolve names none: that GPU is judged idle, which
    can miss a fault but never makes a healthy node a suspect."""
    from workloads.telemetry import device_handle

    out = set()
    for gpu_id in loaded:
        if str(gpu_id).isdigit():
            out.add(int(gpu_id))
            continue
        try:
            handle = device_handle(nvml, str(gpu_id))
            if nvml.nvmlDeviceIsMigDeviceHandle(handle):
                handle = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            out.add(int(nvml.nvmlDeviceGetIndex(handle)))
        except Exception:  # noqa: BLE001, S112 - not found, no permission: judged idle
            continue
    return out


def read_node_health(
    nvml: Any | None = None, loaded: Collection[str] = (), expect_gpus: bool = False
) -> HealthRecord:
    """This node's health now. Never raises.

    ``nvml``: the NVML module (default ``pynvml`` from nvidia-ml-py). ``loaded``: the GPUs a
    workload runs on while this reads (Ray's GPU ids, :func:`loaded_indices`); each GPU's dict
    says ``under_load`` True only for those, and only theirs is a PCIe generation below the
    maximum that counts as a fault (an idle GPU lowers it to save power). ``expect_gpus``: Ray
    says this node has GPUs, so NVML that cannot start or sees none is an ``error``, not the
    CPU node's ``note``.
    """
    cpu = cpu_facts()
    try:
        if nvml is None:
            import pynvml as nvml  # noqa: PLC0415 - absent on some CPU nodes
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - ImportError, LibraryNotFound, DriverNotLoaded
        why = f"NVML unavailable: {type(exc).__name__}: {exc}"
        if expect_gpus:
            return HealthRecord(cpu=cpu, error=f"Ray lists GPUs on this node but {why}")
        return HealthRecord(cpu=cpu, note=NO_GPU_NOTE)
    try:
        count = nvml.nvmlDeviceGetCount()
        busy = loaded_indices(nvml, loaded)
        gpus = tuple(_gpu_facts(nvml, i, i in busy) for i in range(count))
    except Exception as exc:  # noqa: BLE001 - the driver failed mid-way: say so, keep CPU facts
        return HealthRecord(cpu=cpu, error=f"NVML failed: {type(exc).__name__}: {exc}")
    finally:
        with contextlib.suppress(Exception):  # the readings are taken; shutdown is courtesy
            nvml.nvmlShutdown()
    if not gpus:
        if expect_gpus:
            return HealthRecord(cpu=cpu, error="Ray lists GPUs on this node but NVML sees none")
        return HealthRecord(cpu=cpu, note=NO_GPU_NOTE)
    unread = [g["error"] for g in gpus if g["error"]]
    error = f"no GPU could be read: {unread[0]}" if len(unread) == len(gpus) else None
    return HealthRecord(gpus=gpus, cpu=cpu, error=error)


# --- compute probe ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeConfig:
    """The compute probe's fixed workload (one per device kind)."""

    model: str
    """gpt2 size name (``workloads/model.py`` GPT2_SIZES)."""
    seq_len: int
    micro_batch_size: int
    warmup_steps: int
    timed_steps: int


CPU_PROBE = ProbeConfig("gpt2-tiny", seq_len=64, micro_batch_size=2, warmup_steps=2, timed_steps=5)
"""About 0.2 s a step on one thread (2 shared cores: steps 0.17-0.22 s, 650 tokens/s, the same
tokens/s as seq 128 batch 4 at 0.8 s a step): the median of 5 tells a 2x slower CPU node (its
steps spread by a few percent, not by 2x), and a node's turn takes 1.4 s of steps, not 2.4 s
with 10: nodes of one machine take turns, so an emulated cluster of 4 paid 4 of them a check."""
GPU_PROBE = ProbeConfig("gpt2", seq_len=1024, micro_batch_size=8, warmup_steps=5, timed_steps=20)
"""Real gpt2 at full context: compute-bound, so a throttled or slower GPU shows in tokens/s."""
PROBE_SEED = 0


def gpu_precision() -> str:
    """The compute probe's autocast precision on the current GPU: ``bf16`` where the GPU computes
    bf16 in hardware (``device.native_bf16``), else ``fp16``. ``torch.cuda.is_bf16_supported()``
    alone says True on V100 and T4, where bf16 is emulated: the probe would time the emulation,
    and such a node would read slow against its own fleet for no fault of its own."""
    from workloads.device import native_bf16

    return "bf16" if native_bf16() else "fp16"


def compute_probe(node_gpu_ids: Sequence[str] = ()) -> ComputeRecord:
    """Run the fixed probe on this rank's device and return its record (see module docstring).

    ``node_gpu_ids``: the GPUs this process sees (:meth:`FleetRank.compute`: its link's GPUs on
    the node), device 0 being this rank's; empty: CPU. Raises on failure (OOM, no CUDA in this
    torch): the driver stores the error text.
    """
    from workloads.device import choose_device, sync, visible_devices

    os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices(node_gpu_ids)  # before CUDA starts
    import torch

    from workloads.model import VOCAB_SIZE, build_model

    available = torch.cuda.is_available()
    decision = choose_device(
        list(node_gpu_ids),
        0,
        available,
        torch.cuda.device_count() if available else 0,
        torch.__version__,
        torch.version.cuda,
    )
    device = torch.device(decision.device)
    on_gpu = device.type == "cuda"
    cfg = GPU_PROBE if on_gpu else CPU_PROBE
    if on_gpu:
        torch.cuda.set_device(device)
        precision = gpu_precision()
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    else:
        torch.set_num_threads(1)  # every CPU node measured on one core: like with like
        dtype, precision = None, "fp32"
    model = build_model(cfg.model, seed=PROBE_SEED).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(PROBE_SEED)
    tokens = torch.randint(0, VOCAB_SIZE, (cfg.micro_batch_size, cfg.seq_len), generator=gen)
    tokens = tokens.to(device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()

    for _ in range(cfg.warmup_steps):
        step()
    sync(device)
    # read while the steps run; only this rank's GPU is under load (module docstring)
    health = _HealthDuringSteps((decision.nvml_id,)) if on_gpu else None
    times = []
    for i in range(cfg.timed_steps):
        if health is not None and i == cfg.timed_steps // 2:
            health.read_now()  # read while this step runs on the GPU
        t0 = time.perf_counter()
        step()
        sync(device)  # note: a CPU-GPU sync point, outside the step itself
        times.append(time.perf_counter() - t0)
    step_s = median_s(times)
    return ComputeRecord(
        device=str(device),
        model=cfg.model,
        precision=precision,
        seq_len=cfg.seq_len,
        micro_batch_size=cfg.micro_batch_size,
        warmup_steps=cfg.warmup_steps,
        step_times_s=tuple(times),
        tokens_per_s=cfg.micro_batch_size * cfg.seq_len / step_s,
        health_under_load=None if health is None else health.result(),
    )


class _HealthDuringSteps:
    """One ``read_node_health(loaded=...)`` on a background thread, started by :meth:`read_now`
    so it overlaps a timed step; :meth:`result` waits for it. ``loaded``: the probe's GPU."""

    def __init__(self, loaded: Collection[str]) -> None:
        self._loaded = tuple(loaded)
        self._go = threading.Event()
        self._record: HealthRecord | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="fleet-health")
        self._thread.start()

    def _run(self) -> None:
        self._go.wait()
        self._record = read_node_health(loaded=self._loaded, expect_gpus=True)

    def read_now(self) -> None:
        self._go.set()

    def result(self, timeout_s: float = 30.0) -> HealthRecord:
        self._go.set()
        self._thread.join(timeout_s)
        if self._record is None:
            return HealthRecord(cpu=cpu_facts(), error=f"no NVML answer within {timeout_s} s")
        return self._record


def node_health_task(expect_gpus: bool) -> HealthRecord:
    """A Ray task's body: this node's health at idle."""
    return read_node_health(expect_gpus=expect_gpus)


# --- one all_reduce rank ------------------------------------------------------------------------


class FleetRank:
    """A Ray actor class (the driver wraps it with ``ray.remote``), pinned to one node, started
    with the link's env and reused for every measurement of that link on its node."""

    def __init__(self) -> None:
        # The link's own choice, from runtime_env; measurements set the variable per group.
        self._link_ifname = os.environ.get("GLOO_SOCKET_IFNAME") or None
        self._visible: str | None = None

    def ready(self) -> dict[str, Any]:
        """Where this actor runs, after the imports a measurement needs (so none is timed)."""
        import ray
        import torch  # noqa: F401 - imported here, once, not inside the first measurement

        ctx = ray.get_runtime_context()
        return {
            "node_id": ctx.get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "pid": os.getpid(),
        }

    def _see_gpus(self, node_gpu_ids: Sequence[str]) -> None:
        """Every GPU of this link's actors on the node visible, as Ray Train does; once per
        process (CUDA reads ``CUDA_VISIBLE_DEVICES`` when it starts), the same set every time."""
        from workloads.device import visible_devices

        cvd = visible_devices(node_gpu_ids)
        if self._visible is None:
            os.environ["CUDA_VISIBLE_DEVICES"] = self._visible = cvd
        elif cvd != self._visible:
            raise RuntimeError(f"GPU ids changed from {self._visible} to {cvd}: new actor")

    def compute(self, node_gpu_ids: Sequence[str]) -> ComputeRecord:
        """The node's compute probe on its first rank, after the link's measurements: torch is
        imported here already, so the probe costs its steps, not a fresh worker's imports. GPU:
        ``node_gpu_ids`` are the link's GPUs on the node (as in :meth:`all_reduce`), device 0
        this rank's. Nothing the probe built outlives the actor, killed when its link is done."""
        gpus = tuple(g for g in node_gpu_ids if g)
        if gpus:
            self._see_gpus(gpus)
        return compute_probe(gpus)

    def free_port(self) -> int:
        """A TCP port free on this node's Ray IP now (rank 0's rendezvous port)."""
        import ray

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ray.util.get_node_ip_address(), 0))
            return s.getsockname()[1]

    def _gloo_ifname(self, loopback: bool) -> str:
        if loopback:
            return "lo"
        if self._link_ifname:
            return self._link_ifname
        import psutil
        import ray

        ip = ray.util.get_node_ip_address()
        name = ifname_for_ip(psutil.net_if_addrs(), ip)
        if name is None:
            raise RuntimeError(
                f"no interface of this node holds its Ray IP {ip}; set GLOO_SOCKET_IFNAME in "
                "the link's env"
            )
        return name

    def all_reduce(
        self,
        rank: int,
        world_size: int,
        init_method: str,
        use_gpu: bool,
        local_rank: int,
        node_gpu_ids: Sequence[str],
        loopback: bool,
        msg_bytes: int,
        warmup: int,
        iters: int,
        timeout_s: float,
    ) -> CollectiveTimes:
        """Join the group at ``init_method`` and time ``iters`` all_reduces of ``msg_bytes``.

        ``use_gpu``: NCCL on the GPU at ``local_rank`` among ``node_gpu_ids`` (every GPU of this
        link's actors on the node stays visible, as Ray Train does); else gloo on CPU, bound to
        loopback (``loopback``: every rank on this node) or to the node's interface.
        """
        import torch
        import torch.distributed as dist

        from workloads.device import choose_device
        from workloads.linkbench import run_linkbench

        ifname = None
        if use_gpu:
            self._see_gpus(node_gpu_ids)
            decision = choose_device(
                list(node_gpu_ids),
                local_rank,
                torch.cuda.is_available(),
                torch.cuda.device_count() if torch.cuda.is_available() else 0,
                torch.__version__,
                torch.version.cuda,
            )
            backend, device = decision.backend, torch.device(decision.device)
            torch.cuda.set_device(device)
        else:
            backend, device = "gloo", torch.device("cpu")
            ifname = self._gloo_ifname(loopback)
            os.environ["GLOO_SOCKET_IFNAME"] = ifname  # read when the gloo group is built
        if rank != 0:  # rank 0's store listening first: no connect back-off (rank.py)
            from workloads.rank import wait_for_master

            host, _, port = init_method.removeprefix("tcp://").rpartition(":")
            wait_for_master(host, int(port), timeout_s)
        dist.init_process_group(
            backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        try:
            (record,) = run_linkbench(
                device,
                max_bytes=msg_bytes,
                min_bytes=msg_bytes,
                warmup_iters=warmup,
                iters=iters,
                ops=("all_reduce",),
                iter_bytes_budget=None,
            )
        finally:
            dist.destroy_process_group()
        return CollectiveTimes(
            rank=rank,
            world_size=world_size,
            backend=backend,
            device=str(device),
            ifname=ifname,
            msg_bytes=int(record.msg_bytes),
            times_s=tuple(record.times_s),
        )
