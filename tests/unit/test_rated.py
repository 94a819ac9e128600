"""A link's rated rate (orchestrator/analysis/rated.py) over real NVML facts and real topologies
(shared/data/captures/topo, sources in its SOURCES.md), the link_descriptions rows built from them, and
busbw as a share of the rate in the link's label."""

import pytest

from orchestrator.analysis.links import describe_links, link_label
from orchestrator.analysis.rated import (
    idle_gen_text,
    nvlink_per_link,
    pcie_gbps,
    pcie_training,
    rated_link,
)
from orchestrator.topology.discovery import node_rows
from tests import captures
from tests.captures import CAPTURES

TOPO = CAPTURES / "topo"


def gpu(i, name, gen=4, width=16, gen_now=None, width_now=None, nvlinks=None, node="n1"):
    """One ``gpus`` row as NVML reports it (current gen/width default to the maximum)."""
    return {
        "node": node, "gpu_index": i, "name": name, "pcie_gen_max": gen, "pcie_width_max": width,
        "pcie_gen_current": gen if gen_now is None else gen_now,
        "pcie_width_current": width if width_now is None else width_now,
        "nvlink_active_count": nvlinks,
    }  # fmt: skip


A100 = "NVIDIA A100-SXM4-80GB"
H100 = "NVIDIA H100 80GB HBM3"
RTX4090 = "NVIDIA GeForce RTX 4090"


def test_pcie_line_rates_by_generation():
    assert pcie_gbps(4, 16) == pytest.approx(31.5077, rel=1e-4)  # 16 GT/s x 128/130 x 16 / 8
    assert pcie_gbps(5, 16) == pytest.approx(63.0154, rel=1e-4)
    assert pcie_gbps(3, 16) == pytest.approx(15.7538, rel=1e-4)
    assert pcie_gbps(1, 16) == pytest.approx(4.0)  # 2.5 GT/s x 8/10
    assert pcie_gbps(2, 8) == pytest.approx(4.0)
    assert pcie_gbps(6, 16) == pytest.approx(128.0)  # FLIT overhead not subtracted (docstring)
    assert pcie_gbps(7, 16) is None and pcie_gbps(None, 16) is None


def test_nvlink_per_link_rate_from_the_gpu_model():
    assert nvlink_per_link(A100) == (3, 25.0)
    assert nvlink_per_link(H100) == (4, 25.0)
    assert nvlink_per_link("Tesla V100-SXM2-32GB") == (2, 25.0)
    assert nvlink_per_link("Tesla P100-SXM2-16GB") == (1, 20.0)
    assert nvlink_per_link("NVIDIA B200") == (5, 50.0)
    assert nvlink_per_link("NVIDIA GH200 480GB") == (4, 25.0)  # not read as H200 by accident
    assert nvlink_per_link("NVIDIA GeForce RTX 3090") == (3, 14.0625)  # GA102: slower links
    assert nvlink_per_link("NVIDIA A400") is None  # not A40
    assert nvlink_per_link(RTX4090) is None and nvlink_per_link(None) is None


def test_a100_nv12_is_300_gbps_one_way():
    r = rated_link("NV12", [gpu(0, A100, nvlinks=12), gpu(1, A100, nvlinks=12)])
    assert (r.gbps, r.source) == (300.0, "nvlink")
    assert "NVLink3 12 links x 25 GB/s = 300 GB/s per direction" in r.text


def test_h100_nv18_is_450_gbps_one_way():
    r = rated_link("NV18", [gpu(0, H100, gen=5, nvlinks=18), gpu(1, H100, gen=5, nvlinks=18)])
    assert (r.gbps, r.source) == (450.0, "nvlink")


def test_fewer_active_nvlinks_than_the_class_says_rate_the_active_ones():
    r = rated_link("NV12", [gpu(0, A100, nvlinks=10), gpu(1, A100, nvlinks=12)])
    assert r.gbps == 250.0 and "only 10 active" in r.notes[0]


def test_unknown_gpu_model_on_nvlink_is_null_with_the_reason():
    r = rated_link("NV4", [gpu(0, "NVIDIA Future X1"), gpu(1, "NVIDIA Future X1")])
    assert r.gbps is None and r.source is None and "Future X1" in r.text


def test_rtx4090_pcie_gen4_x16():
    r = rated_link("PHB", [gpu(0, RTX4090), gpu(1, RTX4090)])
    assert r.source == "pcie" and r.gbps == pytest.approx(31.5, abs=0.05)
    assert "PCIe gen4 x16 = 31.5 GB/s" in r.text and not r.faults and not r.notes


def test_the_slower_gpu_sets_the_pcie_rate():
    r = rated_link("PXB", [gpu(0, RTX4090, gen=5), gpu(1, RTX4090, gen=3)])
    assert r.gbps == pytest.approx(pcie_gbps(3, 16)) and "gen3" in r.text


def test_a_gen4_x8_trained_link_is_flagged_and_rated_at_its_maximum():
    g = gpu(1, RTX4090, width_now=8)
    fault, note = pcie_training(g)
    assert "GPU1 on n1 PCIe trained at x8 of x16" in fault and note is None
    r = rated_link("PHB", [gpu(0, RTX4090), g])
    assert r.gbps == pytest.approx(pcie_gbps(4, 16)) and r.faults == (fault,)


def test_an_idle_gen1_reading_is_a_note_not_a_fault():
    g = gpu(0, RTX4090, gen_now=1)
    fault, note = pcie_training(g)
    assert fault is None and note == "GPU0 on n1 gen1 of gen4"
    r = rated_link("PIX", [g, gpu(1, RTX4090)])
    assert r.gbps == pytest.approx(31.5, abs=0.05) and not r.faults and r.idle_gen == (note,)
    assert "normal at idle" in idle_gen_text(r.idle_gen) and idle_gen_text(()) == ""


def test_sys_is_a_pcie_upper_bound_and_says_so():
    r = rated_link("SYS", [gpu(0, RTX4090), gpu(1, RTX4090)])
    assert r.source == "pcie" and "upper bound" in r.text


def test_p2p_off_goes_through_host_memory_even_on_nvlink():
    r = rated_link("NV12", [gpu(0, A100), gpu(1, A100)], p2p_off=True)
    assert r.source == "pcie" and r.gbps == pytest.approx(31.5, abs=0.05)
    assert "host memory" in r.text
    off = rated_link("NV12", [gpu(0, A100), gpu(1, A100)], p2p_off=True, shm_off=True)
    assert off.gbps is None and "network path" in off.text


@pytest.mark.parametrize("cls", ["NET", "shared-gpu", "unknown", None])
def test_classes_without_a_rate_are_null(cls):
    r = rated_link(cls, [gpu(0, A100), gpu(1, A100)])
    assert r.gbps is None and r.source is None and r.text


def test_no_inventory_is_null():
    assert rated_link("PHB", []).gbps is None


# --- link_descriptions rows from real topologies and planted inventories ---------------------


def _tables(topo_file: str, gpus: list[dict]) -> dict:
    report = {
        "node_id": "x", "hostname": "n1", "topo_text": captures.read(TOPO / topo_file),
        "topo_status": "ok", "inventory": [{"index": g["gpu_index"], **g} for g in gpus],
    }  # fmt: skip
    return node_rows("s", [report])


def _describe(links, topo_file, gpus, placements=("pack",)):
    t = _tables(topo_file, gpus)
    rows = describe_links(links, {}, "s", t["gpus"], t["gpu_links"], list(placements))
    return {r["link"]: r for r in rows}


def test_h100x8_nv18_link_is_rated_450_and_p2p_off_pcie():
    gpus = [gpu(i, H100, gen=5, nvlinks=18) for i in range(8)]
    rows = _describe(
        {"nvlink": {}, "no_p2p": {"NCCL_P2P_DISABLE": "1"}},
        "thunderkittens_167_h100x8_nv18.txt",
        gpus,
    )
    assert (rows["nvlink"]["rated_gbps"], rows["nvlink"]["rated_source"]) == (450.0, "nvlink")
    assert "every GPU pair, NV18" in rows["nvlink"]["description"]
    assert rows["no_p2p"]["rated_source"] == "pcie"
    assert rows["no_p2p"]["rated_gbps"] == pytest.approx(pcie_gbps(5, 16))
    assert "P2P off" in rows["no_p2p"]["description"]


def test_a100x2_nv12():
    rows = _describe({"nv": {}}, "sglang_661_a100x2_nv12_nics.txt", [gpu(0, A100), gpu(1, A100)])
    assert (rows["nv"]["rated_gbps"], rows["nv"]["rated_source"]) == (300.0, "nvlink")


def test_rtx4090x8_all_sys_with_a_narrow_link_flagged_in_the_description():
    gpus = [gpu(i, RTX4090) for i in range(8)]
    gpus[3] = gpu(3, RTX4090, width_now=8)
    row = _describe({"pcie": {}}, "go_gpuallocator_17_rtx4090x8.txt", gpus)["pcie"]
    assert row["rated_source"] == "pcie" and row["rated_gbps"] == pytest.approx(31.5, abs=0.05)
    assert "PCIE TRAINED BELOW MAXIMUM: GPU3 on n1 PCIe trained at x8 of x16" in row["description"]


def test_idle_generations_are_said_once_per_link():
    gpus = [gpu(i, RTX4090, gen_now=1) for i in range(8)]
    row = _describe({"pcie": {}}, "go_gpuallocator_17_rtx4090x8.txt", gpus)["pcie"]
    assert "TRAINED BELOW" not in row["description"]
    assert row["description"].count("normal at idle") == 1
    assert "(GPU0 on n1 gen1 of gen4, GPU1 on n1 gen1 of gen4," in row["description"]


def test_mixed_classes_leave_the_rate_null_with_each_class_in_words():
    gpus = [gpu(i, "NVIDIA H100 NVL", gen=5, nvlinks=12) for i in range(3)]
    row = _describe({"any": {}}, "nccl_1608_h100nvl_nv12_sys.txt", gpus)["any"]
    assert row["rated_gbps"] is None and row["rated_source"] is None
    assert "depends on the GPUs a run gets" in row["description"]
    assert "300 GB/s" in row["description"] and "SYS" in row["description"]


def test_spread_only_is_not_rated_and_cpu_runs_say_why():
    gpus = [gpu(0, A100), gpu(1, A100)]
    spread = _describe({"x": {}}, "sglang_661_a100x2_nv12_nics.txt", gpus, ["spread"])["x"]
    assert spread["rated_gbps"] is None and "across nodes" in spread["description"]
    cpu = describe_links({"lo": {}}, {}, "s")[0]
    assert cpu["rated_gbps"] is None and "no GPU inventory" in cpu["description"]


def test_emulated_links_keep_the_tc_rate():
    shapes = {"ls-slow": {"link": "slow", "rate": "500mbit", "delay": None, "rated_gbps": 0.0625}}
    row = describe_links({"slow": {"GLOO_SOCKET_IFNAME": "ls-slow"}}, shapes, "s")[0]
    assert (row["rated_gbps"], row["rated_source"]) == (0.0625, "tc")


def test_label_shows_busbw_as_a_share_of_the_rated_rate():
    slow = {"kind": "emulated", "rate": "500mbit", "rated_gbps": 0.0625, "rated_source": "tc",
            "measured_busbw_gbps": 0.055, "busbw_share": 0.055 / 0.0625}  # fmt: skip
    assert link_label("slow", slow) == (
        "slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.055 GB/s = 88% of the tc rate 500mbit)"
    )
    nv = {"kind": "nccl", "rated_gbps": 450.0, "rated_source": "nvlink",
          "measured_busbw_gbps": 370.0, "busbw_share": 370 / 450}  # fmt: skip
    assert link_label("nv", nv) == "nv (NVLink 450 GB/s; measured busbw 370 GB/s = 82% of NVLink)"


def test_share_over_100_percent_reads_as_measured_with_its_reason():
    """NVLS all_reduce on HGX H100 reaches a busbw above NV18's 450 GB/s per direction: the share
    reads as measured (never clipped to 100%, never an error) and says why it can happen."""
    from orchestrator.analysis.rated import share_words

    nv18 = rated_link("NV18", [gpu(i, H100, gen=5, nvlinks=18) for i in range(2)])
    assert nv18.gbps == 450.0  # the rate the share is taken of
    over = share_words(504.0 / nv18.gbps, nv18.source, "NVLink")
    assert over.startswith("112% of NVLink, above the rated rate: ")
    assert "NVLS in-switch reduction can exceed the link rate" in over
    assert share_words(370 / 450, "nvlink", "NVLink") == "82% of NVLink"  # below: no note
    assert share_words(1.0, "nvlink", "NVLink") == "100% of NVLink"
    assert share_words(1.004, "pcie", "PCIe") == "100% of PCIe"  # rounds to 100%: no note
    burst = share_words(0.0650 / 0.0625, "tc", "the tc rate 500mbit")
    assert burst.startswith("104% of the tc rate 500mbit, above the rated rate: ")
    assert "token bucket" in burst
    pcie = share_words(1.2, "pcie", "PCIe")
    assert pcie.startswith("120% of PCIe") and "check" in pcie
    assert "a reading to check" in share_words(1.5, None, "the rated rate")


def test_a_link_label_over_its_rated_rate_says_so_with_the_reason():
    """The link label (run output, report) reads a busbw above NV18's 450 GB/s as measured, with
    why; it read a bare "112% of NVLink" before."""
    nv = {"kind": "nccl", "rated_gbps": 450.0, "rated_source": "nvlink",
          "measured_busbw_gbps": 504.0, "busbw_share": 504 / 450}  # fmt: skip
    label = link_label("nvls", nv)
    assert label.startswith("nvls (NVLink 450 GB/s; measured busbw 504 GB/s = 112% of NVLink, ")
    assert "NVLS in-switch reduction can exceed the link rate" in label
