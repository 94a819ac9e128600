"""Grid expansion and run order, without Ray."""

from orchestrator.planner import expand_grid, link_placements, plan_runs
from orchestrator.spec import parse_spec


def spec(**grid):
    return parse_spec(
        {
            "name": "p",
            "repeats": 3,
            "links": {"a": {}, "b": {"X": "1"}},
            "grid": grid,
        }
    )


def test_cartesian_product_in_file_order():
    variants = expand_grid(spec(strategy=["ddp", "zero3"], grad_accum=[1, 4]))
    assert len(variants) == 2 * 2 * 2  # strategies x grad_accum x links
    assert [(v.strategy, v.grad_accum, v.link) for v in variants[:3]] == [
        ("ddp", 1, "a"),
        ("ddp", 1, "b"),
        ("ddp", 4, "a"),
    ]


def test_offload_applies_to_zero_only():
    variants = expand_grid(
        spec(strategy=["ddp", "zero2", "zero3"], offload=["none", "cpu", "nvme"])
    )
    ddp = [v for v in variants if v.strategy == "ddp"]
    assert {v.offload for v in ddp} == {"none"} and len(ddp) == 2  # one per link, no duplicates
    assert {v.offload for v in variants if v.strategy == "zero2"} == {"none", "cpu"}
    assert {v.offload for v in variants if v.strategy == "zero3"} == {"none", "cpu", "nvme"}


def test_repeats_are_interleaved_round_robin():
    runs = plan_runs(spec(grad_accum=[1, 2]))
    n_variants = 4
    assert len(runs) == n_variants * 3
    assert [r.seq for r in runs] == list(range(1, 13))
    assert [r.repeat for r in runs] == [1] * 4 + [2] * 4 + [3] * 4
    assert [r.variant for r in runs[:4]] == [r.variant for r in runs[4:8]]


def test_link_placements():
    assert link_placements(spec(placement=["pack", "spread"])) == [
        ("a", "pack"),
        ("a", "spread"),
        ("b", "pack"),
        ("b", "spread"),
    ]
