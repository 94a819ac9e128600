"""The accumulation check in the report and in ``linksweep run``'s summary: a failed run is
named with its strategy, flavour, grad_accum and the bytes sent against promised; a sweep whose
runs all passed says nothing (synthetic run rows, no database)."""

from __future__ import annotations

from orchestrator import report
from orchestrator.report.accumulation import accumulation_failures, accumulation_lines
from orchestrator.report.plots import bytes_by_strategy
from orchestrator.report.sections import (
    accumulation_html,
    attention,
    attention_html,
    classic_tables,
    fixed_settings,
    strategy_title,
)

KEY = {"offload": "none", "bucket_mb": 25, "overlap_comm": "default", "placement": "pack"}
FSDP_LAST = {"strategy": "fsdp", "grad_compression": "n/a", "powersgd_rank": 0, "grad_sync": "last",
             "reshard_after_forward": "true", "bucket_mb": 0}  # fmt: skip
FSDP_EACH = FSDP_LAST | {"grad_sync": "each"}
DDP_LAST = {"strategy": "ddp", "grad_compression": "none", "powersgd_rank": 0, "grad_sync": "last",
            "reshard_after_forward": "n/a"}  # fmt: skip
ZERO3 = {"strategy": "zero3", "grad_compression": "n/a", "powersgd_rank": 0, "grad_sync": "n/a",
         "reshard_after_forward": "n/a"}  # fmt: skip
# The planted bug of a "last" flavour that reduce-scatters on every micro-batch anyway: gpt2's
# padded fp32 gradients, 7 non-final micro-batches of grad_accum 8.
RS_BYTES = 7 * 497_764_352
FAIL = f"fail: reduce_scatter sent {RS_BYTES} B, promised 0 B"


def _run(seq, variant, ga, link, check, status="ok"):
    return KEY | variant | {
        "run_id": f"s1-r{seq:04d}", "seq": seq, "grad_accum": ga, "link": link,
        "status": status, "accum_check": check, "repeat": 1,
    }  # fmt: skip


PASSING = [
    _run(1, DDP_LAST, 1, "fast", "n/a: grad_accum 1 has no non-final micro-batch"),
    _run(2, DDP_LAST, 8, "fast", "ok"),
    _run(3, ZERO3, 8, "fast", "unchecked: no promise known for this strategy"),
    _run(4, FSDP_EACH, 8, "fast", "ok"),
    _run(5, FSDP_EACH, 8, "slow", "ok"),
    _run(6, DDP_LAST, 8, "slow", None, status="failed"),  # no profiled pass: no verdict
]
FAILING = [
    *PASSING,
    _run(7, FSDP_LAST, 8, "fast", FAIL),
    _run(8, FSDP_LAST, 8, "slow", FAIL),
    _run(9, DDP_LAST, 8, "slow", "fail: all_reduce sent 3981914112 B, promised 0 B"),
]


def _data(**over) -> report.ReportData:
    base = {
        "sweep": {"sweep_id": "s1", "name": "unit", "status": "ok", "git_sha": "abc",
                  "git_dirty": False},
        "spec": {"model": "gpt2", "links": {"fast": {}, "slow": {}}},
        "versions": {}, "baseline_link": "fast", "link_order": ["fast", "slow"],
        "runs": [], "variants": [], "sensitivity": [], "step_times": [], "bandwidth": [],
        "bench_failures": [], "nodes": [], "gpus": [], "gpu_links": [],
    }  # fmt: skip
    return report.ReportData(**(base | over))


def test_all_passing_says_nothing():
    assert accumulation_failures(PASSING) == []
    assert accumulation_lines(PASSING) == []
    assert accumulation_html(PASSING) == ""
    data = _data(runs=PASSING)
    assert not any("ccumulation" in x for x in attention(data))
    assert "ccumulation" not in attention_html(data)


def test_a_failure_names_runs_strategy_flavour_grad_accum_and_bytes():
    lines = accumulation_lines(FAILING)
    assert lines[0].startswith("ACCUMULATION CHECK FAILED on 3 of 6 checked run(s): ")
    # DDP before FSDP2 (the headline's order); its own flavour named, since the check is about it
    assert lines[1:] == [
        "  DDP (sync last) at grad_accum 8 (link slow): all_reduce sent 3,981,914,112 B "
        "(3,982 MB), promised 0 B; run(s) s1-r0009",
        "  FSDP2 (reshard, sync last) at grad_accum 8 (links fast, slow): reduce_scatter sent "
        "3,484,350,464 B (3,484 MB), promised 0 B; run(s) s1-r0007, s1-r0008",
    ]
    (ddp, fsdp) = accumulation_failures(FAILING)
    assert fsdp.run_ids == ("s1-r0007", "s1-r0008") and fsdp.links == ("fast", "slow")
    assert (fsdp.variant, fsdp.grad_accum) == ("FSDP2 (reshard, sync last)", 8)


def test_two_verdicts_of_one_variant_are_two_entries():
    other = "fail: reduce_scatter sent 100 B, promised 0 B"
    runs = [_run(1, FSDP_LAST, 4, "fast", FAIL), _run(2, FSDP_LAST, 4, "slow", other)]
    details = [f.detail for f in accumulation_failures(runs)]
    assert sorted(details) == [
        "reduce_scatter sent 100 B, promised 0 B",
        "reduce_scatter sent 3,484,350,464 B (3,484 MB), promised 0 B",
    ]


def test_report_says_it_in_the_box_and_under_runs_needing_attention():
    data = _data(runs=FAILING)
    doubts = attention(data)
    assert any(x.startswith("ACCUMULATION CHECK FAILED on 3 of 6") for x in doubts)
    assert any(x.startswith("FSDP2 (reshard, sync last) at grad_accum 8") for x in doubts)
    html = attention_html(data)
    assert "<h3>Accumulation check failures</h3>" in html
    assert "<td>FSDP2 (reshard, sync last)</td><td class='num'>8</td><td>fast, slow</td>" in html
    assert "<code>s1-r0007, s1-r0008</code>" in html
    page = report.render_html(data, [])
    assert "<div class='warn'><b>Read with care</b>" in page
    assert "ACCUMULATION CHECK FAILED on 3 of 6 checked run(s)" in page
    every_run = page.split("id='runs'")[1]
    assert "<th>accum_check</th>" in every_run and "n/a: grad_accum 1 has no" in every_run


def test_classic_tables_keep_fsdp2_flavours_apart():
    def variant(v, link, med):
        return KEY | v | {
            "grad_accum": 8, "link": link, "n_runs": 2, "n_excluded": 0,
            "median_step_time_s": med, "ci_low_s": med, "ci_high_s": med * 1.1,
            "comm_dtypes": "all_gather fp32 + reduce_scatter fp32",
        }  # fmt: skip

    no_reshard = FSDP_EACH | {"reshard_after_forward": "false"}
    variants = [
        variant(v, link, med * (2 if link == "slow" else 1))
        for v, med in ((FSDP_EACH, 3.0), (no_reshard, 2.0), (DDP_LAST, 1.0))
        for link in ("fast", "slow")
    ]
    html = classic_tables(_data(variants=variants))
    ddp, fsdp = html.split("<h3>")[1:3]
    assert fsdp.startswith("FSDP2 <small>(sync each, sent")  # no bucket, the default placement
    assert "<th>reshard_after_forward</th>" in fsdp
    assert "<td>true</td>" in fsdp and "<td>false</td>" in fsdp  # two rows, not one
    assert fsdp.count("<tr><td>") == 2
    assert "3.00 s" in fsdp and "2.00 s" in fsdp
    assert ddp.startswith("DDP <small>(bucket 25 MB, sent")  # its own no_sync
    assert strategy_title("fsdp") == "FSDP2" and strategy_title("hsdp").startswith("HSDP")


def test_fixed_settings_name_the_flavour():
    v = KEY | FSDP_LAST | {"reshard_after_forward": "false", "comm_dtypes": None}
    # as FSDP2's name reads them (reshard, then sync); the default placement is not named
    assert fixed_settings([v], set()) == ["no reshard", "sync last"]
    ddp_each = KEY | DDP_LAST | {"grad_sync": "each", "comm_dtypes": None}
    assert fixed_settings([ddp_each], set()) == ["sync each", "bucket 25 MB"]
    assert fixed_settings([KEY | DDP_LAST | {"comm_dtypes": None}], set()) == ["bucket 25 MB"]
    assert fixed_settings([KEY | ZERO3 | {"comm_dtypes": None}], set()) == ["bucket 25 MB"]
    spread = KEY | ZERO3 | {"placement": "spread", "comm_dtypes": None}
    assert fixed_settings([spread], set()) == ["bucket 25 MB", "placement spread"]


def test_bytes_figure_keeps_sync_flavours_apart():
    def run(v, nbytes):
        return KEY | v | {"status": "ok", "grad_accum": 8, "comm_bytes_per_step": nbytes,
                          "expected_comm_bytes_per_step": None}  # fmt: skip

    runs = [run(DDP_LAST, 5e8), run(DDP_LAST | {"grad_sync": "each"}, 4e9), run(ZERO3, 1e9)]
    by = bytes_by_strategy(runs)
    assert {s: g[8]["measured"] for s, g in by.items()} == {
        "ddp sync=last": [5e8],
        "ddp sync=each": [4e9],
        "zero3": [1e9],
    }
