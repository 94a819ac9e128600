"""The fleet check's groups (orchestrator/fleet/groups.py) on synthetic mixed fleets: nodes are
judged only against nodes of their own kind and GPU model, so a healthy mixed fleet (A100 and
A10G nodes and a CPU node, as clusters/aws-gpu.yaml mixes p4d and g5) names nobody, and one
A10G slowed 4x is named alone; pairs across groups are judged by failure only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from orchestrator.fleet.groups import (
    CPU,
    group_key,
    judge_groups,
    node_groups,
    pair_msg_bytes,
    rule_for,
)
from orchestrator.fleet.suspects import CPU_REL, Failed, Rule, judge

A100, A10G = "NVIDIA A100-SXM4-40GB", "NVIDIA A10G"
LINK = "default"
NODES = {"a0": A100, "a1": A100, "g0": A10G, "g1": A10G, "c0": None}
INTRA = {A100: 230.0, A10G: 12.0, None: 1.5}  # GB/s: NVSwitch, PCIe, gloo over loopback
TOKENS = {A100: 130_000.0, A10G: 35_000.0, None: 650.0}  # tokens/s of the compute probe


def pair_busbw(a: str, b: str) -> float:
    """Inter-node busbw, GB/s: EFA between p4d nodes, less between g5 nodes and across, gloo
    over the network with a CPU node."""
    models = {NODES[a], NODES[b]}
    if None in models:
        return 0.9
    return {frozenset({A100}): 40.0, frozenset({A10G}): 5.0}.get(frozenset(models), 4.0)


def mixed(slowed: str | None = None, factor: float = 4.0):
    """(groups, inter, intra, compute) of the five-node fleet; ``slowed``: that node ``factor``
    times slower in every figure."""
    k = {n: factor if n == slowed else 1.0 for n in NODES}
    groups = {n: group_key(0 if m is None else 4, [m]) for n, m in NODES.items()}
    ids = list(NODES)
    inter = {
        (a, b): pair_busbw(a, b) / max(k[a], k[b]) for i, a in enumerate(ids) for b in ids[i + 1 :]
    }
    intra = {n: INTRA[m] / k[n] for n, m in NODES.items()}
    compute = {n: TOKENS[m] / k[n] for n, m in NODES.items()}
    return groups, {LINK: inter}, {LINK: intra}, compute


def judged(slowed=None, factor=4.0, **kw):
    groups, inter, intra, compute = mixed(slowed, factor)
    rules = {g: rule_for(g) for g in set(groups.values())}
    return judge_groups(list(NODES), groups, rules, inter, intra, compute, {}, **kw)


def test_group_keys_are_the_kind_and_the_gpu_model():
    assert group_key(0, []) == CPU == "cpu"
    assert group_key(0.5, [A100]) == "cpu"  # a fraction of a GPU runs no fleet rank on it
    assert group_key(8, [A100] * 8) == f"gpu:{A100}"
    assert group_key(2, [A10G, A100, None, " "]) == f"gpu:{A100} + {A10G}"
    assert group_key(1, []) == "gpu:unknown"  # NVML named none: judged with its like only


def test_node_groups_read_the_gpu_names_of_the_health_records():
    nodes = [SimpleNamespace(node_id="x", gpus=4.0), SimpleNamespace(node_id="y", gpus=0.0)]
    health = {"x": SimpleNamespace(gpus=({"name": A10G}, {"name": A10G})), "y": None}
    assert node_groups(nodes, health) == {"x": f"gpu:{A10G}", "y": "cpu"}
    assert node_groups(nodes, {}) == {"x": "gpu:unknown", "y": "cpu"}


def test_each_group_has_its_rule_and_message_size():
    assert rule_for("cpu") == Rule(rel=CPU_REL) and rule_for(f"gpu:{A100}") == Rule()
    assert rule_for("cpu", Rule(rel=0.3)) == Rule(rel=0.3)  # --threshold: every group
    groups = {"a": f"gpu:{A100}", "g": f"gpu:{A10G}", "c": "cpu"}
    sizes = {f"gpu:{A100}": 64 << 20, f"gpu:{A10G}": 64 << 20, "cpu": 4 << 20}
    assert pair_msg_bytes("a", "g", groups, sizes) == 64 << 20
    assert pair_msg_bytes("a", "c", groups, sizes) == 4 << 20  # gloo with a CPU node


def test_one_population_names_healthy_nodes_of_a_mixed_fleet():
    """Why groups: one median over A100, A10G and CPU figures names the CPU node (and, with the
    GPU rule, the A10Gs) though every node is healthy for what it is."""
    _, inter, intra, compute = mixed()
    for rule in (Rule(), Rule(rel=CPU_REL)):
        v = judge(list(NODES), inter, intra, compute, {}, rule=rule)
        assert "c0" in v.suspect_nodes()


def test_a_healthy_mixed_fleet_names_nobody():
    v = judged()
    assert v.suspect_nodes() == [] and v.suspect_pairs() == []
    assert not any(p.slow for p in v.pairs.values())
    across = [n for n in v.notes if "across groups" in n]
    assert len(across) == 1 and across[0].startswith(f"link {LINK}: 8 pair(s) across groups")
    assert all(n.startswith(("group ", "link ")) for n in v.notes)
    assert ("compute cpu", None) not in v.bounds  # one CPU node: nothing to compare with


@pytest.mark.parametrize("slowed", ["a1", "g1"])
def test_one_gpu_node_slowed_4x_is_named_alone(slowed):
    v = judged(slowed)
    assert v.suspect_nodes() == [slowed]
    reasons = " ".join(v.nodes[slowed].reasons)
    assert "compute probe" in reasons and "4.0x below the other node's" in reasons
    assert v.suspect_pairs() == []  # its pairs: not judged across groups, or nothing to compare


def test_a_slower_gpu_model_is_not_named_when_the_fleet_has_several():
    """The A10Gs run at a quarter of the A100s' tokens/s: a different GPU, not a fault."""
    assert TOKENS[A10G] / TOKENS[A100] < 0.3
    assert judged().nodes["g0"].suspect is False


def test_a_failed_pair_across_groups_is_a_suspect_unless_a_suspect_node_explains_it():
    groups, inter, intra, compute = mixed()
    inter[LINK][("a0", "g0")] = Failed("NCCL timeout")
    rules = {g: rule_for(g) for g in set(groups.values())}
    v = judge_groups(list(NODES), groups, rules, inter, intra, compute, {})
    assert v.suspect_pairs() == [(LINK, "a0", "g0")]
    assert v.pairs[(LINK, "a0", "g0")].why == "all_reduce failed: NCCL timeout"
    hot = judge_groups(list(NODES), groups, rules, inter, intra, compute, {"g0": ["GPU0 hot"]})
    assert hot.suspect_pairs() == [] and hot.suspect_nodes() == ["g0"]
    assert hot.pairs[(LINK, "a0", "g0")].why.endswith("explained by suspect node g0")


def test_one_group_judges_as_before_without_group_prefixes():
    ids = ["n0", "n1", "n2", "n3"]
    compute = {"n0": 100.0, "n1": 101.0, "n2": 40.0, "n3": 99.0}
    groups = dict.fromkeys(ids, "cpu")
    v = judge_groups(ids, groups, {"cpu": Rule()}, {}, {}, compute, {})
    assert v == judge(ids, {}, {}, compute, {}, rule=Rule())


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="groups: node 'x' has no group"):
        judge_groups(["x"], {}, {}, {}, {}, {}, {})
    with pytest.raises(ValueError, match=r"rules: no rule for group\(s\) \['cpu'\]"):
        judge_groups(["x"], {"x": "cpu"}, {}, {}, {}, {}, {})


class _MigNvml:
    """What NVML answers of one A100 in MIG mode with two 1g.10gb instances in slots 0 and 2
    (slot 1 empty: NotFound), or of the same GPU with MIG off."""

    def __init__(self, on: bool):
        self.on = on

    def nvmlDeviceGetMigMode(self, h):
        return [int(self.on), int(self.on)]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if self.on else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, i):
        if i not in (0, 2):
            raise LookupError("NVMLError_NotFound")
        return ("mig", i)

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100-SXM4-80GB" + (" MIG 1g.10gb" if isinstance(h, tuple) else "")


def test_a_mig_slice_is_grouped_by_its_instance_not_as_the_whole_gpu():
    """A node whose GPU is cut into 1g.10gb slices computes on a seventh of an A100: judged
    beside whole A100s it would be named slow (before: grouped as the whole GPU's name)."""
    from workloads.fleet_probe import _mig_instances

    assert _mig_instances(_MigNvml(True), 0) == ("NVIDIA A100-SXM4-80GB MIG 1g.10gb",) * 2
    assert _mig_instances(_MigNvml(False), 0) == ()
    assert _mig_instances(object(), 0) == ()  # an NVML without MIG calls
    whole = {"name": "NVIDIA A100-SXM4-80GB", "mig_instances": ()}
    sliced = {"name": "NVIDIA A100-SXM4-80GB", "mig_instances": _mig_instances(_MigNvml(True), 0)}
    nodes = [SimpleNamespace(node_id=n, gpus=1.0) for n in ("w", "m")]
    health = {"w": SimpleNamespace(gpus=(whole,)), "m": SimpleNamespace(gpus=(sliced,))}
    assert node_groups(nodes, health) == {
        "w": "gpu:NVIDIA A100-SXM4-80GB",
        "m": "gpu:NVIDIA A100-SXM4-80GB MIG 1g.10gb",
    }
