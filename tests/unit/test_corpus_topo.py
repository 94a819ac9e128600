"""``parse_topo`` against the corpus: 12 real ``nvidia-smi topo -m`` captures, each with the parse
a correct reader gives (``shared/data/corpus/topo/expected.json``; sources in
``shared/data/corpus/SOURCES.md``).

The expected parse and linksweep's model differ in one way only, mapped here rather than
modelled: expected.json writes ``null`` for an affinity column the header does not have (older
drivers print no ``GPU NUMA ID``, the oldest no ``NUMA Affinity`` either), while ``Topology``
keeps only the cells it read, so an absent column is an empty dict. Nothing in linksweep needs
to tell an absent column from one whose cells are all empty, so the test reads ``null`` as
``{}``.
"""

from __future__ import annotations

import json

import pytest

from orchestrator.topology.matrix import Topology, parse_topo, to_json_dict
from tests.captures import CORPUS, corpus_index, needs

DATA = CORPUS / "topo"
pytestmark = needs(DATA)

FIELDS = {"gpus", "nics", "links", "cpu_affinity", "numa_affinity", "gpu_numa_id", "nic_legend"}


def expected() -> dict[str, dict]:
    return json.loads((DATA / "expected.json").read_text())


def names() -> list[str]:
    # Collected even where the corpus is absent (the module is then skipped, saying why).
    return sorted(expected()) if DATA.is_dir() else []


def load(name: str) -> Topology:
    return parse_topo((DATA / name).read_text())


def as_expected(topo: Topology) -> dict:
    """linksweep's parse in expected.json's terms: the stored form plus the two fields it leaves
    out (GPU NUMA id and the NIC legend), an absent affinity column as ``null``."""
    stored = to_json_dict(topo)
    return {
        "gpus": stored["gpus"],
        "nics": stored["nics"],
        "links": stored["links"],
        "cpu_affinity": stored["cpu_affinity"],
        "numa_affinity": stored["numa_affinity"] or None,
        "gpu_numa_id": dict(topo.gpu_numa_id) or None,
        "nic_legend": dict(topo.nic_legend),
    }


def test_every_capture_has_an_expected_parse_and_a_source():
    assert len(list(DATA.glob("*.txt"))) == 12
    assert corpus_index(DATA, "*.txt", expected()) == []


@pytest.mark.parametrize("name", names())
def test_parse_matches_expected(name):
    want = expected()[name]
    assert set(want) == FIELDS, "expected.json has a field this test does not compare"
    got = as_expected(load(name))
    for key in sorted(FIELDS):
        assert got[key] == want[key], f"{name}: {key}"


def test_nic_columns_out_of_order_are_read_by_name():
    # DGX-1: the header orders the NICs mlx5_0 mlx5_2 mlx5_1 mlx5_3, and GPU0's row reads
    # "... PIX SYS PHB SYS": its own switch's NIC is mlx5_0, the other same-socket one mlx5_1.
    topo = load("05_dgx1-v100-hybrid-cube-mesh_4x-mlx5_tabs.txt")
    row = {nic: topo.nic_links[("GPU0", nic)] for nic in topo.nics}
    assert row == {"mlx5_0": "PIX", "mlx5_2": "SYS", "mlx5_1": "PHB", "mlx5_3": "SYS"}
    assert topo.nic_links[("GPU7", "mlx5_3")] == "PIX"


def test_nic_links_with_a_remapped_legend_keep_the_column_names():
    # The legend maps NIC0 to mlx5_2 (not mlx5_0); nic_links are keyed by the column name, and
    # GPU6's row ends "PXB PXB PXB PXB SYS" for NIC12..NIC15 and the bond NIC16.
    topo = load("11_8gpu-a100-nv12_17nic-legend-remapped-bond.txt")
    assert [topo.nic_links[("GPU6", f"NIC{i}")] for i in range(12, 17)] == ["PXB"] * 4 + ["SYS"]
    assert topo.nic_legend["NIC0"] == "mlx5_2"
    assert topo.nic_legend["NIC16"] == "mlx5_bond_0"
