"""Tests for orchestrator.topology.matrix against real published `nvidia-smi topo -m` output.

Running nvidia-smi on this machine (``workloads.probe.read_topo_text``):
tests/integration/test_node_probe.py.

Fixtures and their sources: shared/data/captures/topo/SOURCES.md (tests/captures.py).
"""

from __future__ import annotations

import pytest

from orchestrator.topology.matrix import (
    LINK_RANK,
    Topology,
    TopoParseError,
    link_sort_key,
    parse_topo,
    run_link_class,
    slowest_link,
    to_json_dict,
    topology_fingerprint,
)
from tests.captures import CAPTURES, needs

DATA = CAPTURES / "topo"
pytestmark = needs(DATA)


def load(name: str) -> Topology:
    return parse_topo((DATA / name).read_text())


def gpus(n: int) -> tuple[str, ...]:
    return tuple(f"GPU{i}" for i in range(n))


# --------------------------------------------------------------------------- every fixture


def test_every_fixture_has_a_source_and_parses():
    files = sorted(p.name for p in DATA.glob("*.txt"))
    sources = (DATA / "SOURCES.md").read_text()
    assert len(files) >= 8
    for name in files:
        assert f"`{name}`" in sources, name
        topo = load(name)
        n = len(topo.gpus)
        assert len(topo.links) == n * (n - 1)
        assert all(cls != "X" for cls in topo.links.values())


# --------------------------------------------------------------------------- BACKGROUND.md pair


def test_background_nvlink_pair_json():
    assert to_json_dict(load("hf_perf_hardware_nv2.txt")) == {
        "gpus": ["GPU0", "GPU1"],
        "nics": [],
        "links": {"GPU0,GPU1": "NV2", "GPU1,GPU0": "NV2"},
        "cpu_affinity": {"GPU0": "0-23", "GPU1": "0-23"},
        "numa_affinity": {"GPU0": "N/A", "GPU1": "N/A"},
    }


def test_background_pcie_pair():
    topo = load("hf_perf_hardware_phb.txt")
    assert topo.links == {("GPU0", "GPU1"): "PHB", ("GPU1", "GPU0"): "PHB"}
    assert topo.cpu_affinity == {"GPU0": "0-11", "GPU1": "0-11"}
    assert topo.gpu_numa_id == {}
    # The two BACKGROUND boxes are different matrices.
    assert topology_fingerprint(topo) != topology_fingerprint(load("hf_perf_hardware_nv2.txt"))


# --------------------------------------------------------------------------- other formats


def test_old_format_soc_and_mlx4_nic():
    topo = load("tensorflow_gdr_k40m_mlx4_soc.txt")
    assert topo.gpus == gpus(4)
    assert topo.nics == ("mlx4_0",)
    assert topo.links[("GPU0", "GPU1")] == "PHB"
    assert topo.links[("GPU0", "GPU2")] == "SYS"  # printed as SOC, the old name
    assert topo.links[("GPU3", "GPU1")] == "SYS"
    assert topo.nic_links[("GPU2", "mlx4_0")] == "PHB"
    assert topo.nic_links[("GPU0", "mlx4_0")] == "SYS"
    assert topo.cpu_affinity == {"GPU0": "0-5", "GPU1": "0-5", "GPU2": "6-11", "GPU3": "6-11"}
    assert topo.numa_affinity == {}
    assert topo.nic_legend == {}


def test_nic_legend_and_spaces():
    topo = load("stelline_rtx6000ada_nic_legend.txt")
    assert topo.gpus == gpus(4)
    assert topo.nics == ("NIC0", "NIC1", "NIC2", "NIC3")
    assert topo.nic_legend == {
        "NIC0": "mlx5_0",
        "NIC1": "mlx5_1",
        "NIC2": "mlx5_2",
        "NIC3": "mlx5_3",
    }
    assert topo.links[("GPU0", "GPU1")] == "NODE"
    assert topo.links[("GPU1", "GPU2")] == "SYS"
    assert topo.nic_links[("GPU2", "NIC2")] == "NODE"
    assert topo.cpu_affinity["GPU3"] == "32-63"
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert topo.gpu_numa_id == {g: "N/A" for g in gpus(4)}
    # to_json_dict keeps the matrix's NIC names, not the legend's.
    assert to_json_dict(topo)["nics"] == ["NIC0", "NIC1", "NIC2", "NIC3"]


def test_tab_format_with_gpu_numa_id_double_tab():
    topo = load("go_gpuallocator_17_rtx4090x8.txt")
    assert topo.gpus == gpus(8)
    assert topo.nics == ("NIC0", "NIC1")
    assert set(topo.links.values()) == {"SYS"}
    assert topo.nic_links[("GPU6", "NIC0")] == "PHB"
    assert topo.nic_links[("GPU6", "NIC1")] == "PHB"
    assert topo.nic_links[("GPU7", "NIC1")] == "SYS"
    assert topo.cpu_affinity["GPU0"] == "0-55,112-167"
    assert topo.cpu_affinity["GPU4"] == "56-111,168-223"
    assert topo.numa_affinity["GPU3"] == "0"
    assert topo.numa_affinity["GPU4"] == "1"
    assert topo.gpu_numa_id["GPU7"] == "N/A"


def test_mixed_nvlink_pair_and_pcie():
    topo = load("siboehm_bench_a6000_nv4_node.txt")
    assert topo.gpus == gpus(3)
    assert topo.links[("GPU0", "GPU1")] == "NV4"
    assert topo.links[("GPU1", "GPU2")] == "NODE"
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "0", "GPU2": "0"}
    assert topo.cpu_affinity["GPU2"] == "0-31,64-95"


def test_h100_nvl_pair():
    topo = load("nccl_1608_h100nvl_nv12_sys.txt")
    assert topo.links[("GPU1", "GPU0")] == "NV12"
    assert topo.links[("GPU0", "GPU2")] == "SYS"
    assert topo.cpu_affinity["GPU2"] == "16-31,48-63"
    assert topo.numa_affinity["GPU2"] == "1"


def test_ansi_remnants_and_nic_legend_b300():
    topo = load("sglang_26039_b300_nv18_ansi.txt")
    assert topo.gpus == gpus(8)
    assert topo.nics == tuple(f"NIC{i}" for i in range(9))
    assert set(topo.links.values()) == {"NV18"}
    assert topo.nic_legend["NIC0"] == "mlx5_10"
    assert topo.nic_legend["NIC8"] == "mlx5_bond_0"
    assert topo.nic_links[("GPU5", "NIC5")] == "PXB"
    assert topo.nic_links[("GPU0", "NIC4")] == "SYS"
    assert topo.cpu_affinity["GPU7"] == "64-127,192-255"
    assert topo.numa_affinity["GPU7"] == "1"
    assert topo.gpu_numa_id["GPU0"] == "N/A"


def test_real_escape_bytes_on_header():
    # nvidia-smi underlines the header when stdout is a terminal: ESC[4m ... ESC[0m.
    lines = (DATA / "hf_perf_hardware_nv2.txt").read_text().splitlines()
    lines[0] = lines[0].replace("GPU0", "\x1b[4mGPU0", 1) + "\x1b[0m"
    topo = parse_topo("\n".join(lines))
    assert to_json_dict(topo) == to_json_dict(load("hf_perf_hardware_nv2.txt"))


def test_h100_sxm_eight_gpus():
    topo = load("thunderkittens_167_h100x8_nv18.txt")
    assert topo.gpus == gpus(8)
    assert topo.links[("GPU3", "GPU7")] == "NV18"
    assert topo.cpu_affinity["GPU4"] == "48-95,144-191"
    assert topo.numa_affinity["GPU0"] == "0"


def test_five_gpu_mixed_pcie():
    topo = load("club3090_46_5gpu_sys_phb_node.txt")
    assert topo.links[("GPU1", "GPU2")] == "PHB"
    assert topo.links[("GPU1", "GPU3")] == "NODE"
    assert topo.links[("GPU0", "GPU4")] == "SYS"
    assert topo.cpu_affinity["GPU0"] == "8-15,24-31"
    assert topo.numa_affinity["GPU0"] == "1"


def test_a100_pair_with_nics_and_no_nic_legend():
    topo = load("sglang_661_a100x2_nv12_nics.txt")
    assert topo.gpus == gpus(2)
    assert topo.nics == ("NIC0", "NIC1", "NIC2", "NIC3", "NIC4")
    assert topo.links[("GPU0", "GPU1")] == "NV12"
    assert topo.nic_links[("GPU1", "NIC2")] == "PXB"
    assert topo.nic_legend == {}


def test_mlx5_names_numa_range_and_cut_nic_rows():
    topo = load("ucx_py_749_dgx_a100_mlx5.txt")
    assert topo.nics == tuple(f"mlx5_{i}" for i in range(12))
    assert topo.links[("GPU0", "GPU1")] == "PXB"
    assert topo.links[("GPU0", "GPU2")] == "SYS"
    assert topo.nic_links[("GPU7", "mlx5_8")] == "PXB"
    assert topo.numa_affinity["GPU5"] == "6-7"
    assert topo.cpu_affinity["GPU5"] == "112-127,240-255"


def test_empty_cpu_affinity_cell_keeps_its_column():
    # Tab form keeps an empty CPU Affinity cell (seen inside cgroups) in place.
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\t44-51,148-155\t0\t\tN/A\n"
        "GPU1\tNV18\t X \t\t1\t\tN/A\n"
    )
    topo = parse_topo(text)
    assert topo.cpu_affinity == {"GPU0": "44-51,148-155"}
    assert topo.numa_affinity == {"GPU0": "0", "GPU1": "1"}
    assert topo.gpu_numa_id == {"GPU0": "N/A", "GPU1": "N/A"}


# --------------------------------------------------------------------------- errors


def test_error_on_garbage_row_names_line():
    lines = (DATA / "hf_perf_hardware_nv2.txt").read_text().splitlines()
    lines.insert(2, "this is not a row")
    with pytest.raises(TopoParseError, match=r"line 3: .*'this is not a row'"):
        parse_topo("\n".join(lines))


def test_error_on_unknown_link_token():
    text = (DATA / "hf_perf_hardware_nv2.txt").read_text().replace("NV2 ", "NVX ", 1)
    with pytest.raises(TopoParseError, match=r"line 2: unknown link token 'NVX'"):
        parse_topo(text)


def test_error_on_short_row():
    text = (DATA / "tensorflow_gdr_k40m_mlx4_soc.txt").read_text()
    text = text.replace("GPU2\tSOC\tSOC\t X \tPHB\tPHB\t6-11", "GPU2\tSOC\tSOC")
    with pytest.raises(TopoParseError, match=r"line 5: expected 5 link cells after GPU2"):
        parse_topo(text)


def test_error_on_missing_gpu_row():
    text = "".join((DATA / "hf_perf_hardware_nv2.txt").read_text().splitlines(True)[:2])
    with pytest.raises(TopoParseError, match=r"line 1: header lists GPU1"):
        parse_topo(text)


def test_error_on_x_off_diagonal():
    text = (
        (DATA / "hf_perf_hardware_phb.txt")
        .read_text()
        .replace("GPU1    PHB      X", "GPU1     X      PHB")
    )
    with pytest.raises(TopoParseError, match=r"line 3: 'X' must mark"):
        parse_topo(text)


def test_error_without_header():
    with pytest.raises(TopoParseError, match=r"line 2: no nvidia-smi topo header"):
        parse_topo("\nNVIDIA-SMI has failed because it couldn't communicate with the driver\n")
    with pytest.raises(TopoParseError):
        parse_topo("")
    assert issubclass(TopoParseError, ValueError)


# --------------------------------------------------------------------------- link ordering


def test_link_rank_order():
    assert LINK_RANK == ("NV", "PIX", "PXB", "PHB", "NODE", "SYS", "NET")
    ordered = ["X", "NV18", "NV12", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS", "NET"]
    assert sorted(reversed(ordered), key=link_sort_key) == ordered
    assert link_sort_key("SOC") == link_sort_key("SYS")
    with pytest.raises(ValueError, match="unknown link class"):
        link_sort_key("QPI")


def test_slowest_link():
    assert slowest_link(["NV12", "SYS", "PIX"]) == "SYS"
    assert slowest_link(["NV18", "NV4"]) == "NV4"
    assert slowest_link(["PHB", "NET"]) == "NET"
    with pytest.raises(ValueError):
        slowest_link([])


def test_run_link_class():
    nv4 = load("siboehm_bench_a6000_nv4_node.txt").links
    assert run_link_class(nv4, [0, 1], "pack") == "NV4"
    assert run_link_class(nv4, [0, 2], "pack") == "NODE"
    assert run_link_class(nv4, [0, 1, 2], "pack") == "NODE"
    assert run_link_class(nv4, [1], "pack") == "X"
    assert run_link_class(nv4, [0, 0], "spread") == "NET"
    assert run_link_class(nv4, [0, 7], "pack") == "unknown"  # GPU7 not in this box
    assert run_link_class({}, [0, 1], "pack") == "unknown"  # CPU run: no topology
    assert run_link_class(None, [0, 1], "pack") == "unknown"
    assert run_link_class(nv4, [], "pack") == "unknown"
    b300 = load("sglang_26039_b300_nv18_ansi.txt").links
    assert run_link_class(b300, list(range(8)), "pack") == "NV18"
    with pytest.raises(ValueError, match="placement 'STRICT_PACK'"):
        run_link_class(nv4, [0, 1], "STRICT_PACK")
