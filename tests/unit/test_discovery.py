"""Discovery and the inspect commands: the pure parts, on real captured text. Discovery on the
session's Ray cluster: tests/integration/test_discovery_ray.py.

Reports are plain dicts shaped like ``probe_node``'s output, with topology text from the real
``nvidia-smi topo -m`` fixtures in shared/data/captures/topo; NCCL logs from shared/data/captures/nccl.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.store import TABLES
from orchestrator.topology import matrix
from orchestrator.topology.discovery import (
    GPU_COLUMNS,
    NodeReport,
    as_report,
    doctor_findings,
    links_by_node,
    node_rows,
)
from tests import captures
from tests.captures import CAPTURES
from tests.unit.stand_in import stand_in

TOPO = CAPTURES / "topo"
NCCL = CAPTURES / "nccl"
CPU_ONLY_MESSAGE = (
    "no GPUs found on any node: link variants cannot differ on this cluster; "
    "the CPU path (gloo) still runs sweeps"
)


def _topo_text(name: str) -> str:
    return captures.read(TOPO / name)


def _gpu(index: int, **over) -> dict:
    """One ``nvml_inventory()`` entry of a healthy GPU."""
    gpu = {
        "index": index,
        "name": "NVIDIA TITAN RTX",
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "pci_bus_id": f"00000000:{index + 1:02X}:00.0",
        "memory_total_bytes": 25_769_803_776,
        "pcie_gen_current": 3,
        "pcie_gen_max": 3,
        "pcie_width_current": 16,
        "pcie_width_max": 16,
        "power_limit_w": 280.0,
        "power_default_limit_w": 280.0,
        "nvlink_active_count": 2,
        "temp_c": 35.0,
    }
    gpu.update(over)
    return gpu


def _gpu_report(topo_file: str, node: str = "box", node_id: str = "aa01", **over) -> dict:
    """A probe dict of a healthy GPU node whose matrix is ``topo_file``."""
    n = len(matrix.parse_topo(_topo_text(topo_file)).gpus)
    report = {
        "node_id": node_id,
        "hostname": node,
        "ip": "10.0.0.1",
        "cpus": 32.0,
        "gpus": float(n),
        "topo_text": _topo_text(topo_file),
        "topo_status": "ok",
        "nvml_ok": True,
        "nvml_status": f"{n} GPU(s), driver 550.54.15",
        "inventory": [_gpu(i) for i in range(n)],
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "cuda_available": True,
        "cuda_device_count": n,
        "p2p": [[None if i == j else True for j in range(n)] for i in range(n)],
        "cuda_status": "ok",
        "nccl_version": "2.21.5",
        "torch_version": "2.4.0",
        "torch_cuda": "12.4",
    }
    report.update(over)
    return report


def _cpu_report(node: str, node_id: str) -> dict:
    return {
        "node_id": node_id,
        "hostname": node,
        "ip": "10.0.0.2",
        "cpus": 2.0,
        "gpus": 0.0,
        "topo_text": None,
        "topo_status": "nvidia-smi not found on PATH (no NVIDIA driver on this node)",
        "nvml_ok": False,
        "nvml_status": "nvmlInit failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found",
        "cuda_status": "CUDA not available to torch 2.4.0+cpu",
    }


def _columns(table: str) -> list[str]:
    """Column names of a table in orchestrator.store.TABLES, in order."""
    cols = []
    for line in TABLES[table].splitlines():
        line = line.split("--")[0].strip().rstrip(",")
        if line:
            cols.append(line.split()[0].strip('"'))
    return cols


# ---------------------------------------------------------------------------------------------
# node_rows / links_by_node
# ---------------------------------------------------------------------------------------------


def test_node_rows_columns_match_store_schema():
    rows = node_rows("s1", [_gpu_report("hf_perf_hardware_nv2.txt")])
    for table in ("nodes", "gpus", "gpu_links"):
        assert rows[table], table
        for row in rows[table]:
            assert list(row) == _columns(table), table
    assert list(GPU_COLUMNS) == _columns("gpus")[3:]


def test_node_rows_nv2_fixture():
    rows = node_rows("s1", [_gpu_report("hf_perf_hardware_nv2.txt", node="titan")])
    assert rows["gpu_links"] == [
        {"sweep_id": "s1", "node": "titan", "gpu_a": "GPU0", "gpu_b": "GPU1", "link": "NV2"},
        {"sweep_id": "s1", "node": "titan", "gpu_a": "GPU1", "gpu_b": "GPU0", "link": "NV2"},
    ]
    (node,) = rows["nodes"]
    assert node["node"] == "titan" and node["node_id"] == "aa01" and node["ip"] == "10.0.0.1"
    assert node["cpus"] == 32.0 and node["gpus"] == 2.0
    assert node["nvml"] == "ok"
    assert node["driver_version"] == "550.54.15" and node["cuda_version"] == "12.4"
    assert node["topo_text"] == _topo_text("hf_perf_hardware_nv2.txt")
    assert [g["gpu_index"] for g in rows["gpus"]] == [0, 1]
    assert rows["gpus"][1]["pci_bus_id"] == "00000000:02:00.0"
    assert rows["gpus"][0]["power_default_limit_w"] == 280.0
    assert "temp_c" not in rows["gpus"][0]  # a live reading, not part of the gpus table


@pytest.mark.parametrize("name", sorted(p.name for p in TOPO.glob("*.txt")))
def test_node_rows_every_ordered_pair(name):
    n = len(matrix.parse_topo(_topo_text(name)).gpus)
    links = node_rows("s", [_gpu_report(name)])["gpu_links"]
    pairs = {(r["gpu_a"], r["gpu_b"]) for r in links}
    assert len(links) == len(pairs) == n * (n - 1)
    assert all(r["gpu_a"] != r["gpu_b"] for r in links)


def test_node_rows_soc_stored_as_sys():
    links = node_rows("s", [_gpu_report("tensorflow_gdr_k40m_mlx4_soc.txt")])["gpu_links"]
    assert {r["link"] for r in links} == {"PHB", "SYS"}


def test_node_rows_unparseable_topo_keeps_text_and_stores_no_links():
    garbage = "GPU0\tGPU1\tCPU Affinity\nGPU0\t X \tBOGUS\t0-3\n"
    report = _gpu_report("hf_perf_hardware_nv2.txt", topo_text=garbage, topo_status="ok")
    rows = node_rows("s", [report])
    assert rows["nodes"][0]["topo_text"] == garbage
    assert rows["gpu_links"] == []
    assert len(rows["gpus"]) == 2


def test_node_rows_cpu_node_and_failed_probe():
    failed = {
        "node_id": "cc03",
        "hostname": "dead",
        "ip": "10.0.0.3",
        "cpus": 8,
        "gpus": 0,
        "error": "RayTaskError: node died",
    }
    rows = node_rows("s", [_cpu_report("cpu1", "bb02"), failed])
    nodes = {r["node"]: r for r in rows["nodes"]}
    assert nodes["cpu1"]["nvml"] == (
        "absent: nvmlInit failed: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    )
    assert nodes["cpu1"]["topo_text"] is None and nodes["cpu1"]["driver_version"] is None
    assert nodes["dead"]["nvml"] == "absent: discovery probe failed: RayTaskError: node died"
    assert nodes["dead"]["cpus"] == 8.0
    assert rows["gpus"] == [] and rows["gpu_links"] == []


def test_node_rows_accepts_reports_and_dicts_alike():
    d = _gpu_report("hf_perf_hardware_phb.txt")
    assert node_rows("s", [d]) == node_rows("s", [as_report(d)])
    assert isinstance(as_report({"node_id": "x", "unknown_key": 1}), NodeReport)


def test_links_by_node_feeds_run_link_class():
    rows = node_rows(
        "s",
        [
            _gpu_report("hf_perf_hardware_nv2.txt", node="nv", node_id="a"),
            _gpu_report("siboehm_bench_a6000_nv4_node.txt", node="mixed", node_id="b"),
            _cpu_report("cpu", "c"),
        ],
    )["gpu_links"]
    by_node = links_by_node(rows)
    assert set(by_node) == {"nv", "mixed"}
    assert by_node["nv"] == {("GPU0", "GPU1"): "NV2", ("GPU1", "GPU0"): "NV2"}
    assert matrix.run_link_class(by_node["mixed"], [0, 1], "pack") == "NV4"
    assert matrix.run_link_class(by_node["mixed"], [0, 2], "pack") == "NODE"
    assert matrix.run_link_class(by_node.get("cpu"), [0, 1], "pack") == "unknown"


# ---------------------------------------------------------------------------------------------
# doctor_findings
# ---------------------------------------------------------------------------------------------


def _codes(findings) -> list[tuple[str, str, bool]]:
    return [(f.node, f.code, f.invalidates) for f in findings]


def test_doctor_cpu_only_cluster():
    findings = doctor_findings([_cpu_report("a", "1"), _cpu_report("b", "2")])
    assert _codes(findings) == [("*", "cpu_only", False)]
    assert findings[0].message == CPU_ONLY_MESSAGE


def test_doctor_healthy_nvlink_node_has_nothing_to_say():
    assert doctor_findings([_gpu_report("hf_perf_hardware_nv2.txt")]) == []


def test_doctor_p2p_blocked_on_nvlink_invalidates():
    report = _gpu_report("hf_perf_hardware_nv2.txt", p2p=[[None, False], [False, None]])
    (f,) = doctor_findings([report])
    assert (f.code, f.invalidates, f.node, f.node_id) == (
        "p2p_blocked_on_nvlink",
        True,
        "box",
        "aa01",
    )
    assert "GPU0" in f.message and "GPU1" in f.message and "NV2" in f.message


def test_doctor_p2p_blocked_on_pcie_is_a_note():
    # nccl_1608: GPU0-GPU1 NV12, GPU2 on SYS: block a SYS pair only.
    p2p = [[None, True, False], [True, None, False], [False, False, None]]
    findings = doctor_findings([_gpu_report("nccl_1608_h100nvl_nv12_sys.txt", p2p=p2p)])
    assert _codes(findings) == [("box", "p2p_unavailable", False)]
    assert "GPU0-GPU2 (SYS)" in findings[0].message and "SHM" in findings[0].message


def test_doctor_nvml_warnings_carry_node_and_gpu():
    inv = [
        _gpu(0, pcie_gen_current=1),  # idle downclock: a note
        _gpu(1, pcie_width_current=8, power_limit_w=200.0),  # both invalidate
    ]
    report = _gpu_report("hf_perf_hardware_phb.txt", inventory=inv, node="pcie")
    findings = doctor_findings([report])
    assert [(f.gpu, f.code, f.invalidates) for f in findings] == [
        (0, "pcie_gen_below_max", False),
        (1, "pcie_width_below_max", True),
        (1, "power_limit_below_default", True),
    ]
    assert all(f.node == "pcie" for f in findings)


def test_doctor_hot_gpu_invalidates():
    report = _gpu_report("hf_perf_hardware_nv2.txt", inventory=[_gpu(0), _gpu(1, temp_c=86.0)])
    assert [(f.gpu, f.code, f.invalidates) for f in doctor_findings([report])] == [(1, "hot", True)]


def test_doctor_failed_probe_invalidates():
    failed = {"node_id": "z", "hostname": "gone", "error": "GetTimeoutError: no answer"}
    findings = doctor_findings([_gpu_report("hf_perf_hardware_nv2.txt"), failed])
    assert _codes(findings) == [("gone", "probe_failed", True)]


def test_doctor_mixed_cluster_and_version_drift():
    a = _gpu_report("hf_perf_hardware_nv2.txt", node="a", node_id="1")
    b = _gpu_report("hf_perf_hardware_nv2.txt", node="b", node_id="2", nccl_version="2.18.1")
    findings = doctor_findings([a, b, _cpu_report("c", "3")])
    assert _codes(findings) == [("c", "no_gpus", False), ("*", "versions_differ", False)]
    assert "a=2.21.5" in findings[1].message and "b=2.18.1" in findings[1].message


def test_doctor_ray_gpu_count_disagrees_with_hardware():
    hidden = _gpu_report("hf_perf_hardware_nv2.txt", gpus=0.0)
    logical = {**_cpu_report("fake", "9"), "gpus": 4.0}
    findings = doctor_findings([hidden, logical])
    assert _codes(findings) == [
        ("box", "ray_gpus_missing", False),
        ("fake", "ray_gpus_logical", False),
    ]


def test_doctor_unreadable_topo_and_missing_p2p_are_notes():
    report = _gpu_report(
        "hf_perf_hardware_nv2.txt",
        topo_text="GPU0 GPU1\nGPU0 X ZZZ\n",
        topo_status="topo parse error: line 2: ...",
        p2p=None,
        cuda_available=False,
        cuda_status="CUDA probe failed: TimeoutExpired",
    )
    assert _codes(doctor_findings([report])) == [
        ("box", "topo_unreadable", False),
        ("box", "p2p_unavailable", False),
    ]


# ---------------------------------------------------------------------------------------------
# topo --parse / transports --parse
# ---------------------------------------------------------------------------------------------


def test_topo_parse_json_exact(capsys):
    assert (
        main(["topo", "--parse", str(captures.path(TOPO / "hf_perf_hardware_nv2.txt")), "--json"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out) == {
        "gpus": ["GPU0", "GPU1"],
        "nics": [],
        "links": {"GPU0,GPU1": "NV2", "GPU1,GPU0": "NV2"},
        "cpu_affinity": {"GPU0": "0-23", "GPU1": "0-23"},
        "numa_affinity": {"GPU0": "N/A", "GPU1": "N/A"},
    }


@pytest.mark.parametrize("name", sorted(p.name for p in TOPO.glob("*.txt")))
def test_topo_parse_every_fixture(name, capsys):
    path = captures.path(TOPO / name)
    assert main(["topo", "--parse", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert out == json.dumps(matrix.to_json_dict(matrix.parse_topo(path.read_text()))) + "\n"
    assert main(["topo", "--parse", str(path)]) == 0
    table = capsys.readouterr().out
    assert "GPU0" in table and "fingerprint" in table


def test_topo_parse_table_shows_links(capsys):
    assert (
        main(["topo", "--parse", str(captures.path(TOPO / "siboehm_bench_a6000_nv4_node.txt"))])
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(r"GPU0\s+X\s+NV4\s+NODE", out)


def test_topo_parse_garbage_exit_2_names_the_line(tmp_path, capsys):
    bad = tmp_path / "topo.txt"
    bad.write_text("        GPU0    GPU1    CPU Affinity\nGPU0     X      NVX     0-3\n")
    assert main(["topo", "--parse", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "line 2" in captured.err and "NVX" in captured.err


def test_topo_parse_not_topo_at_all(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\nworld\n")
    assert main(["topo", "--parse", str(bad)]) == 2
    assert "line" in capsys.readouterr().err


def test_topo_parse_missing_file(tmp_path, capsys):
    assert main(["topo", "--parse", str(tmp_path / "nope.txt"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "nope.txt" in err and "no such file" in err


def test_transports_parse_json_exact(capsys):
    assert (
        main(
            [
                "transports",
                "--parse",
                str(captures.path(NCCL / "nccl_952_ipc_read_socket.log")),
                "--json",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out) == {
        "nccl_version": None,
        "transports": ["NET/Socket", "P2P"],
        "nvls": None,
        "collnet": None,
    }


def test_transports_parse_version_only(capsys):
    assert (
        main(
            [
                "transports",
                "--parse",
                str(captures.path(NCCL / "nccl_1637_rtx5090_p2p_disable_init.log")),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {
        "nccl_version": "2.25.1",
        "transports": [],
        "nvls": None,
        "collnet": None,
    }


def test_transports_parse_table(capsys):
    assert main(["transports", "--parse", str(captures.path(NCCL / "nccl_1817_shm.log"))]) == 0
    out = capsys.readouterr().out
    assert "transports: SHM" in out
    assert re.search(r"7\s+2\s+1\s+-\s+SHM\s+SHM/direct/direct", out)  # Channel 01 : 7 -> 2


def test_transports_parse_garbage_and_missing(tmp_path, capsys):
    bad = tmp_path / "train.log"
    bad.write_text("epoch 1 loss 3.2\nepoch 2 loss 2.9\n")
    assert main(["transports", "--parse", str(bad), "--json"]) == 2
    assert "NCCL_DEBUG=INFO" in capsys.readouterr().err
    assert main(["transports", "--parse", str(tmp_path / "missing.log")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_doctor_command_exit_1_when_a_finding_invalidates(monkeypatch, capsys):
    from orchestrator.commands import doctor

    # doctor joins the cluster through raycluster.session.connect when it runs; the real session imports
    # ray, which unit tests never do, so a stand-in module takes its place for this test.
    connected = []
    fake_session = types.ModuleType("orchestrator.raycluster.session")
    fake_session.connect = lambda address: connected.append(address) or "embedded"
    stand_in(monkeypatch, fake_session)

    blocked = _gpu_report("hf_perf_hardware_nv2.txt", p2p=[[None, False], [False, None]])
    monkeypatch.setattr(doctor, "discover_nodes", lambda: [as_report(blocked)])
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"GPU0\s+X\s+NO", out)  # the P2P matrix
    assert "[INVALIDATES] p2p_blocked_on_nvlink" in out
    assert "NCCL 2.21.5" in out and "driver 550.54.15" in out
    assert CPU_ONLY_MESSAGE not in out

    healthy = _gpu_report("hf_perf_hardware_nv2.txt")
    monkeypatch.setattr(doctor, "discover_nodes", lambda: [as_report(healthy)])
    assert main(["doctor"]) == 0
    assert "nothing invalidates" in capsys.readouterr().out
    assert connected == [None, None]


def _fake_nvidia_smi(folder: Path, q_exit: int) -> None:
    """An ``nvidia-smi`` on PATH that prints its arguments; ``-q`` exits ``q_exit``."""
    exe = folder / "nvidia-smi"
    exe.write_text(f'#!/bin/sh\necho "smi $*"\n[ "$1" = "-q" ] && exit {q_exit}\nexit 0\n')
    exe.chmod(0o755)


def test_capture_nvidia_smi_keeps_each_output_and_says_why_one_failed(monkeypatch, tmp_path):
    import socket

    from workloads.probe import capture_nvidia_smi

    _fake_nvidia_smi(tmp_path, q_exit=9)
    monkeypatch.setenv("PATH", str(tmp_path))
    host, got = capture_nvidia_smi()
    assert host == socket.gethostname()
    assert got == {
        "nvidia-smi topo -m": {"text": "smi topo -m\n", "status": "ok"},
        "nvidia-smi -q": {"text": "smi -q\n", "status": "exit 9"},
    }
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _, got = capture_nvidia_smi()
    assert {g["status"] for g in got.values()} == {"nvidia-smi not found on PATH"}


def test_capture_on_every_node_names_each_node_and_a_silent_one_keeps_its_error(monkeypatch):
    """Each node's captures under the hostname the node gives (discovery's), a node that did
    not answer under Ray's, every capture carrying why."""
    from orchestrator.topology.discovery import capture_on_every_node
    from workloads.probe import capture_nvidia_smi

    answered = ("gpu-worker", {"nvidia-smi topo -m": {"text": "t", "status": "ok"}})
    nodes = types.ModuleType("orchestrator.raycluster.nodes")

    def run_on_every_node(fn, timeout_s, skip=()):
        assert fn is capture_nvidia_smi and timeout_s == 120.0
        return [
            types.SimpleNamespace(node={"hostname": "ip-10-0-0-9", "ip": "10.0.0.9",
                                        "node_id": "b"}, result=None,
                                  error="no answer within 120 s (node busy)"),
            types.SimpleNamespace(node={"hostname": "ray-name", "ip": "10.0.0.2", "node_id": "a"},
                                  result=answered, error=None),
        ]  # fmt: skip

    nodes.run_on_every_node = run_on_every_node
    stand_in(monkeypatch, nodes)
    (worker, worker_caps), (silent, silent_caps) = capture_on_every_node()
    assert (worker, worker_caps) == answered
    assert silent == "ip-10-0-0-9"
    assert set(silent_caps) == {"nvidia-smi topo -m", "nvidia-smi -q"}
    assert all(c["text"] is None for c in silent_caps.values())
    assert {c["status"] for c in silent_caps.values()} == {
        "no answer from the capture task within 120 s (node busy)"
    }


def test_selftest_dry_run_prints_the_plan_and_runs_nothing(monkeypatch, capsys, tmp_path):
    from orchestrator.commands import selftest
    from orchestrator.topology import discovery

    calls = []
    fake_session = types.ModuleType("orchestrator.raycluster.session")
    fake_session.connect = lambda address: calls.append("connect") or "embedded"
    fake_session.disconnect = lambda: calls.append("disconnect")
    stand_in(monkeypatch, fake_session)
    gpu = _gpu_report("hf_perf_hardware_nv2.txt") | {"gpus": 1.0, "cuda_available": True,
                                                     "cuda_device_count": 2}  # fmt: skip
    monkeypatch.setattr(discovery, "discover_nodes", lambda: [as_report(gpu)])
    for name in ("_run_sweep", "_run_fleet", "_doctor", "_capture_nvidia_smi"):
        monkeypatch.setattr(selftest, name, lambda *a, name=name: calls.append(name))
    monkeypatch.chdir(tmp_path)
    assert main(["selftest", "--dry-run", "--peak-tflops", "125"]) == 0
    out = capsys.readouterr().out
    assert calls == ["connect", "disconnect"]  # nothing ran
    assert list(tmp_path.iterdir()) == []  # and no folder was written
    assert "mode gpu; most GPUs Ray offers on one CUDA node: 1" in out
    assert "two_gpu               skip: 1 GPU offered by Ray" in out
