"""orchestrator/compare/nccltests.py on real nccl-tests output (shared/data/captures/nccl_tests, sources in its
SOURCES.md): every imported busbw is the one nccl-tests printed, in every layout."""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.analysis.comm_model import busbw_factor
from orchestrator.compare.nccltests import (
    NcclTestsError,
    implied_world_size,
    import_record,
    infer_op,
    link_bench_rows,
)
from orchestrator.compare.nccltests_json import parse
from tests.captures import CAPTURES, CORPUS, OWN, needs

DATA = CAPTURES / "nccl_tests"
CONSTRUCTED = OWN / "nccl_tests_json_v3_constructed.json"
"""The -J layout as nccl-tests' writer emits it, made by this project (tests/data/SOURCES.md)."""
pytestmark = needs(DATA)


def _read(name: str) -> str:
    return (DATA / name).read_text()


def _cell(run, msg_bytes: int, in_place: bool, repeat: int = 0):
    (row,) = [
        r
        for r in run.rows
        if r.msg_bytes == msg_bytes and r.in_place == in_place and r.repeat == repeat
    ]
    return row


def test_new_layout_mpirun_prefix_banners_and_nccl_info_inside_the_table():
    run = parse(_read("eks_efa_t4_2node_mpirun_prefix.log"), op="all_reduce")
    assert run.layout == "#wrong" and run.op_source == "--op" and run.ops == ("all_reduce",)
    assert run.world_size == 2 and run.world_size_source == "rank banners"
    assert run.hosts == ("test-nccl-efa-worker-0", "test-nccl-efa-worker-1")
    assert run.gpus == ("Tesla T4",)
    assert run.avg_busbw_gbps == 1.15327 and run.out_of_bounds == 0
    assert run.nccl_version == "2.12.7+cuda11.4"
    # "[1,0]<stdout>:   268435456  67108864  float  sum  -1  85119  3.15  3.15  0  85743  3.13  3.13  0"
    oop, inp = _cell(run, 268435456, False), _cell(run, 268435456, True)
    assert (oop.time_us, oop.algbw_gbps, oop.busbw_gbps, oop.wrong) == (85119, 3.15, 3.15, 0)
    assert (inp.time_us, inp.algbw_gbps, inp.busbw_gbps, inp.wrong) == (85743, 3.13, 3.13, 0)
    assert oop.redop == "sum" and oop.root is None and oop.dtype == "float"
    # size 0 is printed twice: two repeats, both left out of link_bench
    assert _cell(run, 0, False, repeat=1).time_us == 6.43
    rows = link_bench_rows(run, "s1", "efa")
    assert all(r["msg_bytes"] > 0 for r in rows) and len(rows) == len(run.rows) - 4
    assert len(run.rows) == 2 * 31


def test_op_from_the_command_line_and_sixteen_ranks_on_two_hosts():
    run = parse(_read("a3mega_h100_2node_binary_on_command_line.log"))
    assert run.ops == ("all_reduce",) and run.op_source == "binary name"
    assert run.world_size == 16 and run.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    last = _cell(run, 8589934592, False)
    assert (last.algbw_gbps, last.busbw_gbps) == (180.71, 338.82)
    assert _cell(run, 8589934592, True).busbw_gbps == 337.35
    assert run.avg_busbw_gbps == 70.742


def test_collective_test_starting_line_names_the_op():
    run = parse(_read("oci_a100_2node_collective_test_starting.log"))
    assert run.op_source == "Collective test starting" and run.ops == ("all_reduce",)
    assert [r.busbw_gbps for r in run.rows] == [191.76, 191.75]
    assert run.world_size == 16 and run.avg_busbw_gbps == 191.752
    with pytest.raises(NcclTestsError, match="line 24: the file names all_reduce_perf"):
        parse(_read("oci_a100_2node_collective_test_starting.log"), op="all_gather")


def test_srun_label_prefix_world_size_from_busbw_over_algbw():
    run = parse(_read("awsome_p5_srun_label_prefix.log"), op="all_reduce")
    assert run.world_size == 16 and run.world_size_source == "busbw/algbw"  # 2x p5.48xlarge
    assert run.avg_busbw_gbps is None
    top = _cell(run, 17179869184, False)
    assert (top.time_us, top.busbw_gbps) == (66132, 487.09)
    assert _cell(run, 17179869184, True).busbw_gbps == 487.26
    # a --world-size that contradicts the printed factor is refused, naming both
    with pytest.raises(NcclTestsError, match="implies 16 ranks, not the 8 of --world-size"):
        parse(_read("awsome_p5_srun_label_prefix.log"), op="all_reduce", world_size=8)


def test_all_gather_with_na_and_indentation():
    run = parse(_read("gke_a3high_all_gather_na_indented.log"), op="all_gather")
    assert run.ops == ("all_gather",) and run.world_size == 16
    row = _cell(run, 536870912, False)
    assert (row.time_us, row.algbw_gbps, row.busbw_gbps) == (7098.6, 75.63, 70.90)
    assert row.wrong is None and row.redop is None and row.root is None  # redop 'none'
    assert _cell(run, 536870912, True).busbw_gbps == 71.35
    assert run.avg_busbw_gbps == 30.9622


def test_old_layout_alltoall_blank_redop_and_error_column():
    run = parse(_read("superbench_alltoall_old_layout_na.log"), op="alltoall")
    assert run.layout == "error" and run.ops == ("all_to_all",) and run.world_size == 8
    row = _cell(run, 8589934592, False)
    assert (row.algbw_gbps, row.busbw_gbps, row.wrong, row.max_error) == (
        256.36,
        224.31,
        None,
        None,
    )
    assert row.redop is None
    assert run.avg_busbw_gbps == 58.6481


def test_old_layout_error_column_is_a_deviation_not_a_count():
    run = parse(_read("azureml_nd96amsr_a100_old_layout_error_values.log"), op="all_reduce")
    assert run.layout == "error" and run.world_size == 16  # 2 nodes x 8 A100, from the factor
    row = _cell(run, 8589934592, True)
    assert (row.time_us, row.algbw_gbps, row.busbw_gbps) == (85070, 100.98, 189.33)
    assert (row.wrong, row.max_error) == (None, 5e-07)
    assert _cell(run, 33554432, False).busbw_gbps == 105.97
    assert import_record(run, "a.log", "x", "ib")["max_error"] == 5e-07


def test_old_layout_broadcast_root_without_redop():
    run = parse(_read("superbench_broadcast_old_layout_root.log"), op="broadcast")
    row = _cell(run, 8589934592, False)
    assert (row.root, row.redop, row.busbw_gbps) == (0, None, 232.81)
    assert row.algbw_gbps == row.busbw_gbps  # broadcast's factor is 1
    assert run.avg_busbw_gbps == 64.8653


@pytest.mark.parametrize(
    "name, op, n",
    [
        ("a3mega_h100_2node_binary_on_command_line.log", None, 16),
        ("awsome_p5_srun_label_prefix.log", "all_reduce", 16),
        ("gke_a3high_all_gather_na_indented.log", "all_gather", 16),
        ("superbench_alltoall_old_layout_na.log", "alltoall", 8),
        ("oci_a100_2node_collective_test_starting.log", None, 16),
        ("azureml_nd96amsr_a100_old_layout_error_values.log", "all_reduce", 16),
    ],
)
def test_printed_busbw_follows_the_field_notes_factors(name, op, n):
    """busbw = algbw x 2(n-1)/n (all_reduce) or (n-1)/n (all_gather, alltoall), the factors
    comm_model.busbw_factor uses (FIELD_NOTES 'Bandwidth accounting'), within print rounding
    (two decimals on algbw and busbw: 0.005 x 1.875 + 0.005)."""
    run = parse(_read(name), op=op)
    for r in run.rows:
        if r.algbw_gbps and r.algbw_gbps >= 10:
            assert r.busbw_gbps == pytest.approx(r.algbw_gbps * busbw_factor(r.op, n), abs=0.015)


def test_a_wrong_op_shows_in_the_bus_factor():
    # the columns already rule all_reduce out: no reduction, one part per rank in the buffer
    with pytest.raises(
        NcclTestsError,
        match=r"line 4: --op all_reduce, but the table fits all_gather, all_to_all \(redop none",
    ):
        parse(_read("gke_a3high_all_gather_na_indented.log"), op="all_reduce")
    with pytest.raises(
        NcclTestsError, match="line 55: --op all_gather, but the table fits all_reduce"
    ):
        parse(_read("eks_efa_t4_2node_mpirun_prefix.log"), op="all_gather")


def test_implied_world_size_only_where_the_figures_decide():
    assert implied_world_size("all_reduce", 255.62, 479.28) == 16
    assert implied_world_size("all_gather", 75.63, 70.90) == 16
    assert implied_world_size("broadcast", 232.81, 232.81) is None
    assert implied_world_size("all_reduce", 0.57, 0.57) is None  # too few digits


def test_json_as_util_cu_writes_it():
    text = CONSTRUCTED.read_text()
    run = parse(text)
    assert run.layout == "json" and run.op_source == "json args" and run.ops == ("all_reduce",)
    assert run.world_size == 16 and run.world_size_source == "json devices"
    assert [(r.in_place, r.busbw_gbps, r.wrong) for r in run.rows] == [
        (False, 191.76, 0),
        (True, 191.75, 0),
    ]
    assert run.avg_busbw_gbps == 191.752 and run.nccl_version == "22605"
    assert run.hosts == ("inst-li3ob-ao-ub24", "inst-wyzi7-ao-ub24")


def test_json_version_1_spelling_null_nwrong_and_cpu_time():
    doc = json.loads(CONSTRUCTED.read_text())
    doc["average_bus_bandwidith"] = {"bandwidith": 12.5, "okay": "unchecked"}
    del doc["average_bus_bandwidth"]
    doc["results"][0]["in_place"] = {
        "cpu_time": 7.0,
        "alg_bw": 1.0,
        "bus_bw": 1.875,
        "nwrong": None,
    }
    run = parse(json.dumps(doc))
    assert run.avg_busbw_gbps == 12.5 and run.time_kind == "cputime"
    assert _cell(run, 10737418240, True).wrong is None


def test_link_bench_rows_keep_printed_figures():
    run = parse(_read("gke_a3high_all_gather_na_indented.log"), op="all_gather")
    rows = link_bench_rows(run, "s1", "tcpx")
    r = next(x for x in rows if x["msg_bytes"] == 536870912 and x["in_place"])
    assert r["source"] == "nccl-tests" and r["status"] == "ok" and r["iteration"] == 0
    assert (r["busbw_gbps"], r["algbw_gbps"], r["wrong"]) == (71.35, 76.11, None)
    assert r["time_s"] == pytest.approx(7054.3e-6) and r["world_size"] == 16
    rec = import_record(run, "x.log", "abc", "tcpx")
    assert rec["avg_busbw_gbps"] == 30.9622 and rec["rows"] == 20 and rec["ops"] == ["all_gather"]


@pytest.mark.parametrize(
    "text, op, message",
    [
        ("hello\n", None, "no nccl-tests table"),
        (
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   8   2  float  sum  -1  1.0  0.00  x.xx  0  1.0  0.00  0.00  0\n",
            "all_reduce",
            "line 2: busbw 'x.xx' is not a number",
        ),
        (
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   8   2  float  sum  -1  1.0\n",
            "all_reduce",
            "line 2: 6 cells; the header at line 1 has 13 columns",
        ),
        (
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   8   2  float  none  -1  1.0  0.00  0.00  N/A  1.0  0.00  0.00  N/A\n",
            None,
            "line 1: the file does not name its collective .* fits all_gather and all_to_all "
            r"\(redop none .*\); pass --op",
        ),
        (
            "./build/sendrecv_perf -b 8\n"
            "#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
            "   8   2  float  sum  -1  1.0  0.00  0.00  0  1.0  0.00  0.00  0\n",
            None,
            "sendrecv_perf: linksweep stores all_reduce",
        ),
    ],
)
def test_bad_input_names_the_line(text, op, message):
    with pytest.raises(NcclTestsError, match=message):
        parse(text, op=op)


def test_report_table_puts_both_sources_side_by_side_never_pooled():
    from orchestrator.report.nccltests_view import beside_html, beside_rows
    from orchestrator.report.reading import ReportData

    ours = [
        {"link": "nv", "placement": "same-node", "collective": "all_reduce",
         "msg_bytes": 1048576, "busbw_gbps": 12.3456, "world_size": 2},
        {"link": "nv", "placement": "same-node", "collective": "all_gather",
         "msg_bytes": 1048576, "busbw_gbps": 5.0, "world_size": 2},
    ]  # fmt: skip
    run = parse(_read("a3mega_h100_2node_binary_on_command_line.log"))
    theirs = [
        {"link": "nv", "collective": r["op"], "msg_bytes": r["msg_bytes"],
         "in_place": r["in_place"], "busbw_gbps": r["busbw_gbps"], "world_size": 16}
        for r in link_bench_rows(run, "s", "nv")
    ]  # fmt: skip
    rows = beside_rows(ours, theirs)
    assert {r["collective"] for r in rows} == {"all_reduce"}  # nccl-tests measured no all_gather
    mib = next(r for r in rows if r["msg_bytes"] == 1048576)
    assert (mib["linksweep"], mib["oop"], mib["ip"]) == ({"same-node": 12.3456}, 9.68, 9.49)
    data = ReportData(
        sweep={}, spec={}, versions={}, baseline_link=None, link_order=["nv"], runs=[],
        variants=[], sensitivity=[], step_times=[], bandwidth=ours, bench_failures=[],
        nodes=[], gpus=[], gpu_links=[], bandwidth_nccl_tests=theirs,
    )  # fmt: skip
    html = beside_html(data)
    assert "<td class='num'>1 MiB</td><td class='num'>12.3</td><td class='num'>9.68</td>" in html
    assert "338.82" in html and "(16 ranks)" in html
    empty = ReportData(**{**data.__dict__, "bandwidth_nccl_tests": []})
    assert beside_html(empty) == ""


def test_two_tables_of_two_ops_in_one_log():
    text = (
        "$ ./build/all_gather_perf -b 1M -e 512M -f 2 -g 8\n"
        + _read("gke_a3high_all_gather_na_indented.log")
        + _read("oci_a100_2node_collective_test_starting.log")
    )
    run = parse(text)
    assert run.ops == ("all_gather", "all_reduce") and run.world_size == 16
    assert run.op_source == "Collective test starting, binary name"
    assert _cell(run, 536870912, False).busbw_gbps == 70.90
    assert _cell(run, 10737418240, False).busbw_gbps == 191.76


def test_per_iteration_and_timestamp_columns_are_skipped():
    """Header and row in the form src/util.cu writeResultHeader / writeBenchmarkLineBody print
    with -I 1 -S 1 (nccl-tests 2.19; no public capture found): extra columns ignored."""
    text = (
        "# Collective test starting: reduce_scatter_perf\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv%           timestamp\n"
        "    16777216        524288     float     sum      -1   200.00   83.89   78.64       0"
        "   190.00   210.00   209.00     2.50   201.00   83.47   78.25       0   191.00   211.00"
        "   210.00     2.40  2026-01-01 12:00:00\n"
    )
    (oop, inp) = parse(text, world_size=16).rows
    assert (oop.op, oop.busbw_gbps, oop.time_us, inp.busbw_gbps) == (
        "reduce_scatter",
        78.64,
        200.0,
        78.25,
    )


# --- which collective, from the table alone ---------------------------------------------------
ALLOWS = {
    # (capture, ops the table allows once the lines naming a binary are taken out)
    "a3mega_h100_2node_binary_on_command_line.log": ("all_reduce",),
    "awsome_p5_srun_label_prefix.log": ("all_reduce",),
    "azureml_nd96amsr_a100_old_layout_error_values.log": ("all_reduce",),  # redop, no root col
    "eks_efa_t4_2node_mpirun_prefix.log": ("all_reduce",),
    # redop none, root -1, size = count x 4 x 16, in-place N/A as out-of-place (-c 0): the two
    # share the bus factor (n-1)/n and nothing printed tells them apart
    "gke_a3high_all_gather_na_indented.log": ("all_gather", "all_to_all"),
    "oci_a100_2node_collective_test_starting.log": ("all_reduce",),
    "superbench_alltoall_old_layout_na.log": ("all_to_all",),  # blank redop cells
    "superbench_broadcast_old_layout_root.log": ("broadcast",),  # root column, no redop
}
CORPUS_DIR = CORPUS / "nccltests"
CORPUS_ALLOWS = {
    "01": ("all_reduce",), "02": ("all_reduce",), "03": ("all_reduce",), "04": ("all_reduce",),
    "05": ("reduce_scatter",),  # redop sum, size = count x 4 x 8, busbw/algbw 7/8
    "06": ("broadcast",), "07": ("all_gather",),  # in-place checked: not alltoall
    "08": ("all_to_all",),  # in-place #wrong N/A while out-of-place is checked
    "09": ("all_to_all",), "10": ("all_reduce",), "11": ("all_reduce",), "12": ("all_reduce",),
}  # fmt: skip


def _unnamed(text: str) -> str:
    """The text without the lines that name the binary, so only the table decides."""
    return "\n".join(line for line in text.splitlines() if "_perf" not in line)


def _allowed(text: str) -> tuple[str, ...]:
    try:
        return parse(_unnamed(text)).ops
    except NcclTestsError as exc:
        found = re.search(r"fits (.+?) \(", str(exc))
        assert found and "pass --op" in str(exc), str(exc)
        return tuple(found.group(1).split(" and "))


@pytest.mark.parametrize("name", sorted(ALLOWS))
def test_each_capture_names_or_allows_its_op(name):
    assert _allowed(_read(name)) == ALLOWS[name]


@needs(CORPUS_DIR)
@pytest.mark.parametrize("key", sorted(CORPUS_ALLOWS))
def test_each_corpus_file_allows_its_op(key):
    (path,) = CORPUS_DIR.glob(f"{key}_*.txt")
    assert _allowed(path.read_text()) == CORPUS_ALLOWS[key]


def _cells(redop, root, size, count, algbw, busbw, oop="0", ip="0", dtype="float"):
    keys = {"size": str(size), "count": str(count), "type": dtype}
    if redop is not None:
        keys["redop"] = redop
    if root is not None:
        keys["root"] = root
    return [{**keys, "algbw": algbw, "busbw": busbw, "oop_wrong": oop, "ip_wrong": ip}]


NEW = ["size", "count", "type", "redop", "root"]


@pytest.mark.parametrize(
    "columns, cells, world, ops, why",
    [
        # reduce_scatter and all_reduce both print a redop and root -1; size/count and the bus
        # factor (n-1)/n against 2(n-1)/n tell them apart
        (NEW, _cells("sum", "-1", 4096, 128, 20.0, 17.5), None, ("reduce_scatter",), "x 8"),
        (NEW, _cells("sum", "-1", 4096, 1024, 20.0, 35.0), 8, ("all_reduce",), "redop sum"),
        # reduce against broadcast: both rooted, only reduce reduces
        (NEW, _cells("sum", "0", 4096, 1024, 20.0, 20.0), None, ("reduce",), "root 0"),
        (NEW, _cells("none", "3", 4096, 1024, 20.0, 20.0), None, ("broadcast",), "root 3"),
        # all_gather and alltoall: same columns, size, bus factor; validation off leaves both
        (NEW, _cells("none", "-1", 4096, 512, 20.0, 10.0, "N/A", "N/A"), None,
         ("all_gather", "all_to_all"), "redop none"),
        # a ratio that is no op's factor: nothing left
        (NEW, _cells("sum", "-1", 4096, 1024, 20.0, 50.0), None, (), "busbw/algbw 2.5"),
    ],
)  # fmt: skip
def test_infer_op_from_columns_and_figures(columns, cells, world, ops, why):
    found = infer_op(columns, cells, world)
    assert found.ops == ops and any(why in r for r in found.reasons)
    assert found.op == (ops[0] if len(ops) == 1 else None)


def test_an_op_the_file_rules_out_is_refused_naming_both():
    with pytest.raises(NcclTestsError, match="--op broadcast, but the table fits all_to_all"):
        parse(_read("superbench_alltoall_old_layout_na.log"), op="broadcast")
    run = parse(_read("gke_a3high_all_gather_na_indented.log"), op="alltoall")
    assert run.ops == ("all_to_all",) and run.op_source == "--op"
