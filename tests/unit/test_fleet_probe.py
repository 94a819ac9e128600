"""workloads.fleet_probe's pure parts: the health read over a fake NVML (tests/unit/fake_nvml.py),
the interface-for-IP lookup over psutil-shaped data, and the max/median of timings. No Ray, no
torch process group: the measurements themselves are tests/integration/test_fleet_ray.py.
"""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from tests.unit.fake_nvml import FakeNvml, health_gpu, thermally_throttled_gpu, x8_of_x16_gpu
from workloads.fleet_contract import HealthRecord
from workloads.fleet_probe import (
    CPU_PROBE,
    GPU_PROBE,
    NO_GPU_NOTE,
    ifname_for_ip,
    max_over_ranks,
    median_s,
    mem_available_bytes,
    read_node_health,
)

GPU_KEYS = {
    "index",
    "name",
    "uuid",
    "mig_instances",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
    "clock_reasons",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "temp_c",
    "ecc_uncorrected",
    "ecc_corrected",
    "under_load",
    "error",
}


# --- health ---------------------------------------------------------------------------------


def test_healthy_gpus_every_key_read_and_nvml_released():
    fake = FakeNvml([health_gpu(0), health_gpu(1, ecc={"uncorrected": 2, "corrected": 17})])
    rec = read_node_health(nvml=fake)
    assert rec.error is None and rec.note is None
    assert [g["index"] for g in rec.gpus] == [0, 1]
    g0, g1 = rec.gpus
    assert set(g0) == GPU_KEYS
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["uuid"].startswith("GPU-00000000")
    assert (g0["pcie_gen_current"], g0["pcie_gen_max"]) == (1, 5)  # idle: the link at gen 1
    assert (g0["sm_clock_mhz"], g0["sm_clock_max_mhz"]) == (1980, 1980)
    assert g0["temp_c"] == 41.0 and g0["clock_reasons"] == 0x1
    assert (g1["ecc_uncorrected"], g1["ecc_corrected"]) == (2, 17)
    assert g0["under_load"] is False and g0["error"] is None
    assert fake.initialised == 1 and fake.shut_down == 1


def test_x8_of_x16_link_is_read_as_such():
    rec = read_node_health(nvml=FakeNvml([health_gpu(0), x8_of_x16_gpu(1)]))
    widths = [(g["pcie_width_current"], g["pcie_width_max"]) for g in rec.gpus]
    assert widths == [(16, 16), (8, 16)]


def test_thermally_throttled_gpu_reasons_and_clocks():
    fake = FakeNvml([thermally_throttled_gpu()])
    with fake.loaded(0):
        rec = read_node_health(nvml=fake, loaded=("0",))
    (g,) = rec.gpus
    assert g["clock_reasons"] == 0x40
    assert g["sm_clock_mhz"] == 1200 and g["sm_clock_max_mhz"] == 1980
    assert g["temp_c"] == 92.0 and g["under_load"] is True
    assert (g["pcie_gen_current"], g["pcie_gen_max"]) == (5, 5)  # loaded: the trained gen


def test_only_the_gpus_named_loaded_are_under_load_by_index_uuid_or_mig_instance():
    mig = "MIG-11111111-2222-3333-4444-555555555555"
    fake = FakeNvml([health_gpu(0), health_gpu(1), health_gpu(2, mig=[mig]), health_gpu(3)])
    uuid1 = health_gpu(1)["uuid"]
    rec = read_node_health(nvml=fake, loaded=("3", uuid1, mig, "GPU-not-on-this-node"))
    assert [g["under_load"] for g in rec.gpus] == [False, True, True, True]
    assert [g["under_load"] for g in read_node_health(nvml=fake).gpus] == [False] * 4


def test_old_driver_reasons_come_from_the_older_call():
    fake = FakeNvml([thermally_throttled_gpu()], driver="old")
    (g,) = read_node_health(nvml=fake).gpus
    assert g["clock_reasons"] == 0x40
    assert fake.event_reason_reads == 0 and fake.throttle_reason_reads == 1


def test_ancient_driver_reasons_unavailable_rest_still_read():
    (g,) = read_node_health(nvml=FakeNvml([thermally_throttled_gpu()], driver="ancient")).gpus
    assert g["clock_reasons"] is None
    assert g["sm_clock_mhz"] == 1200 and g["error"] is None


def test_unsupported_readings_are_none_not_errors():
    gpu = health_gpu(ecc=None, sm_max_mhz=None, gen=None, width_max=None)
    (g,) = read_node_health(nvml=FakeNvml([gpu])).gpus
    assert g["ecc_uncorrected"] is None and g["ecc_corrected"] is None
    assert g["sm_clock_max_mhz"] is None
    assert g["pcie_gen_current"] is None and g["pcie_width_max"] is None
    assert g["pcie_width_current"] == 16 and g["error"] is None


def test_no_permission_per_gpu_error_and_record_error():
    fake = FakeNvml([health_gpu(0), health_gpu(1)], no_permission=True)
    rec = read_node_health(nvml=fake)
    assert [g["error"] for g in rec.gpus] == [
        "NVMLError_NoPermission: Insufficient Permissions"
    ] * 2
    assert rec.error == "no GPU could be read: NVMLError_NoPermission: Insufficient Permissions"
    assert fake.shut_down == 1


def test_a_reading_without_permission_is_none():
    gpu = health_gpu(ecc=FakeNvml.NVMLError_NoPermission("Insufficient Permissions"))
    (g,) = read_node_health(nvml=FakeNvml([gpu])).gpus
    assert g["ecc_corrected"] is None and g["error"] is None


def test_no_nvml_on_a_cpu_node_is_a_note_with_cpu_facts():
    fake = FakeNvml([], init_error=FakeNvml.NVMLError("NVML Shared Library Not Found"))
    rec = read_node_health(nvml=fake)
    assert rec == HealthRecord(cpu=rec.cpu, note=NO_GPU_NOTE)
    assert set(rec.cpu) == {"cpus", "loadavg_1m", "mem_available_bytes"}
    assert rec.cpu["cpus"] >= 1 and rec.cpu["mem_available_bytes"] > 0
    assert read_node_health(nvml=FakeNvml([])).note == NO_GPU_NOTE  # NVML, zero GPUs


def test_no_nvml_where_ray_lists_gpus_is_an_error():
    fake = FakeNvml([], init_error=FakeNvml.NVMLError("Driver Not Loaded"))
    rec = read_node_health(nvml=fake, expect_gpus=True)
    assert rec.note is None and rec.gpus == ()
    assert (
        rec.error
        == "Ray lists GPUs on this node but NVML unavailable: NVMLError: Driver Not Loaded"
    )
    rec = read_node_health(nvml=FakeNvml([]), expect_gpus=True)
    assert rec.error == "Ray lists GPUs on this node but NVML sees none"


def test_mem_available_parsed_in_bytes():
    text = "MemTotal:       16318412 kB\nMemFree:  1 kB\nMemAvailable:   12000000 kB\n"
    assert mem_available_bytes(text) == 12_000_000 * 1024
    assert mem_available_bytes("MemTotal: 5 kB\n") is None


# --- interface for an IP --------------------------------------------------------------------


def _addr(family, address):
    return SimpleNamespace(family=family, address=address, netmask=None, broadcast=None)


ADDRS = {  # psutil.net_if_addrs() on an emulated node: lo, ctl, a shaped link
    "lo": [_addr(socket.AF_INET, "127.0.0.1"), _addr(socket.AF_INET6, "::1")],
    "ctl": [_addr(socket.AF_INET, "198.18.0.3"), _addr(socket.AF_INET6, "fe80::1%ctl")],
    "ls-net": [_addr(socket.AF_INET, "198.18.1.3"), _addr(socket.AF_PACKET, "02:fc:00:00:00:01")],
}


@pytest.mark.parametrize(
    ("ip", "want"),
    [
        ("198.18.0.3", "ctl"),
        ("198.18.1.3", "ls-net"),
        ("127.0.0.1", "lo"),
        ("fe80::1", "ctl"),  # zone suffix ignored
        ("10.0.0.9", None),
    ],
)
def test_ifname_for_ip(ip, want):
    assert ifname_for_ip(ADDRS, ip) == want


def test_ifname_for_ip_same_answer_whatever_the_dict_order():
    twice = {"b": [_addr(socket.AF_INET, "10.0.0.1")], "a": [_addr(socket.AF_INET, "10.0.0.1")]}
    assert ifname_for_ip(twice, "10.0.0.1") == "a"


# --- max over ranks, median -----------------------------------------------------------------


def test_max_over_ranks_is_per_iteration():
    assert max_over_ranks([[1.0, 3.0, 2.0], [2.0, 1.0, 2.5]]) == (2.0, 3.0, 2.5)
    assert max_over_ranks([[0.5]]) == (0.5,)
    assert max_over_ranks([]) == ()


def test_max_over_ranks_refuses_uneven_counts():
    with pytest.raises(ValueError, match=r"different iteration counts \[1, 2\]"):
        max_over_ranks([[1.0, 2.0], [1.0]])


def test_median_s():
    assert median_s([3.0, 1.0, 2.0]) == 2.0
    assert median_s([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert median_s([]) is None


def test_probe_configs_are_the_fixed_ones():
    assert (CPU_PROBE.model, CPU_PROBE.seq_len, CPU_PROBE.micro_batch_size) == ("gpt2-tiny", 64, 2)
    assert (CPU_PROBE.warmup_steps, CPU_PROBE.timed_steps) == (2, 5)
    assert (GPU_PROBE.model, GPU_PROBE.seq_len, GPU_PROBE.micro_batch_size) == ("gpt2", 1024, 8)
    assert (GPU_PROBE.warmup_steps, GPU_PROBE.timed_steps) == (5, 20)


class _RecordingRay:
    """What ``orchestrator.raycluster.pinned_probes`` asks of Ray for its per-node tasks, recorded: the
    decorator's options and each call's ``.options()``; each task runs here, at once."""

    def __init__(self):
        self.decorated: list[dict] = []
        self.called: list[dict] = []
        self.exceptions = SimpleNamespace(GetTimeoutError=TimeoutError)

    def remote(self, **decorator):
        self.decorated.append(decorator)

        def wrap(fn):
            def options(**call):
                self.called.append(call)
                return SimpleNamespace(remote=lambda *a: fn(*a))

            return SimpleNamespace(options=options)

        return wrap

    def wait(self, refs, num_returns, timeout):
        return refs, []

    def get(self, ref, timeout=None):
        return ref


class _Actor:
    """A FleetRank stand-in: ``compute`` answers, raises or is refused per node."""

    def __init__(self, answer):
        self.answer = answer
        self.compute = SimpleNamespace(remote=self._call)
        self.calls: list = []

    def _call(self, gpu_ids):
        self.calls.append(list(gpu_ids))
        return self.answer  # the "ref": _RaisingRay.get raises it when it is an error


class _RaisingRay(_RecordingRay):
    def get(self, ref, timeout=None):
        if isinstance(ref, Exception):
            raise ref
        return ref


def test_health_tasks_are_pinned_ask_for_nothing_and_an_error_is_a_record(monkeypatch):
    """NVML only: no CPU, no GPU asked for (a fleet check runs alone), one task per node, pinned;
    a node whose task raises gets a HealthRecord with the error, not an exception."""
    from orchestrator.raycluster import pinned_probes as ray_side

    fake = _RaisingRay()
    monkeypatch.setattr(ray_side, "ray", fake)

    def health(gpus):  # the fake's "ref" is the answer; an error is raised by ray.get
        return HealthRecord(note=str(gpus)) if gpus else RuntimeError("nvml gone\nsecond line")

    monkeypatch.setattr(ray_side, "node_health_task", health)
    nodes = [
        ray_side.FleetNode("a" * 56, "10.0.0.1", "h1", cpus=8.0, gpus=1.0),
        ray_side.FleetNode("b" * 56, "10.0.0.2", "h2", cpus=8.0, gpus=0.0),
    ]
    g, c = (n.node_id for n in nodes)  # Ray checks a node id is 28 bytes of hex
    got = ray_side.read_health(nodes)
    assert got[g].note == "True"
    assert got[c].error == "health not read: RuntimeError: nvml gone"
    assert fake.decorated == [{"max_retries": 0}]
    assert [(x["num_cpus"], x["num_gpus"]) for x in fake.called] == [(0, 0), (0, 0)]
    assert [x["scheduling_strategy"].node_id for x in fake.called] == [g, c]


def test_compute_runs_on_each_nodes_first_rank_with_the_nodes_gpus(monkeypatch):
    """The compute probe goes to the first rank of each asked node (torch imported there), with
    every GPU of the link's ranks on that node; a node whose ranks did not start gets the reason,
    one that raises gets its error's first line; the answers come in the nodes' order."""
    from orchestrator.raycluster import pinned_probes as ray_side

    monkeypatch.setattr(ray_side, "ray", _RaisingRay())
    nodes = [
        ray_side.FleetNode(x * 56, f"10.0.0.{i}", "h", cpus=8.0, gpus=2.0)
        for i, x in enumerate("abc")
    ]
    a, b, c = (n.node_id for n in nodes)
    probes = ray_side.LinkProbes(nodes, {})
    first, second = _Actor("record a"), _Actor("never")
    probes._actors = {a: [first, second], b: [_Actor(RuntimeError("OOM\nmore"))]}
    probes._gpu_ids = {a: ["3", "5"], b: ["0"]}
    probes._broken = {c: "actors on the node did not start: boom"}
    probes._start = lambda ids: None  # c stays broken
    got = probes.compute([c, a, b])
    assert list(got) == [c, a, b]
    assert got == {
        c: "actors on the node did not start: boom",
        a: "record a",
        b: "RuntimeError: OOM",
    }
    assert first.calls == [["3", "5"]] and second.calls == []


@pytest.mark.parametrize(
    ("capability", "want"), [((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")]
)
def test_the_compute_probe_uses_bf16_only_where_the_gpu_has_it_natively(
    monkeypatch, capability, want
):
    """V100 (7.0) and T4 (7.5) emulate bf16: torch's plain is_bf16_supported() says True there,
    the hardware question (including_emulation=False) says False, as torch answers it."""
    import torch

    from workloads.fleet_probe import gpu_precision

    def is_bf16_supported(including_emulation=True):
        return including_emulation or capability >= (8, 0)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", None)
    assert gpu_precision() == want
