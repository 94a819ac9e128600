"""The report's first screen from plain rows: headline first, caveats, links described, the
rated rate on the busbw figure, throttling "not checked" wherever telemetry is absent."""

from __future__ import annotations

from orchestrator import report
from orchestrator.report.findings import caveats_html, links_html, throttling

KEY = {"offload": "none", "bucket_mb": 25, "placement": "spread"}
LINKS = {"fast": {"GLOO_SOCKET_IFNAME": "ls-fast"}, "slow": {"GLOO_SOCKET_IFNAME": "ls-slow"}}
OVERVIEW = [
    {"sweep_id": "s1", "link": "fast", "kind": "emulated", "interface": "ls-fast", "rate": None,
     "delay": None, "rated_gbps": None, "measured_busbw_gbps": 0.21,
     "description": "emulated link ls-fast between network namespaces: unshaped (no tc rate)",
     "link_classes": "NET", "transports": "gloo/tcp"},
    {"sweep_id": "s1", "link": "slow", "kind": "emulated", "interface": "ls-slow",
     "rate": "500mbit", "delay": None, "rated_gbps": 0.0625, "measured_busbw_gbps": 0.0601,
     "description": "emulated link ls-slow between network namespaces: tc rate 500mbit",
     "link_classes": "NET", "transports": "gloo/tcp"},
]  # fmt: skip


def _run(seq, strategy, ga, link, med):
    return KEY | {
        "seq": seq, "strategy": strategy, "grad_accum": ga, "link": link, "repeat": 1,
        "status": "ok", "backend": "gloo", "telemetry": "absent: no NVML", "throttled": None,
        "median_step_time_s": med, "n_steps": 4,
    }  # fmt: skip


def _data(**over):
    variants, sens, runs = [], [], []
    figures = {("ddp", 1): (0.2, 0.38), ("ddp", 8): (1.0, 1.19), ("zero3", 1): (0.3, 0.69),
               ("zero3", 8): (1.4, 4.41)}  # fmt: skip
    for i, ((strategy, ga), (fast, slow)) in enumerate(figures.items()):
        for link, med, pred in (("fast", fast, 0.001), ("slow", slow, 0.8 * (slow - fast))):
            variants.append(
                KEY
                | {
                    "strategy": strategy,
                    "grad_accum": ga,
                    "link": link,
                    "n_runs": 2,
                    "n_excluded": 0,
                    "median_step_time_s": med,
                    "ci_low_s": med * 0.9,
                    "ci_high_s": med * 1.1,
                    "interval_kind": "range",
                    "comm_bytes_per_step": 13.5e6 if strategy == "ddp" else 27.1e6 * ga,
                    "predicted_comm_s_per_step": pred,
                }  # fmt: skip
            )
            runs.append(_run(2 * i + (link == "slow"), strategy, ga, link, med))
        r = slow / fast
        sens.append(
            KEY
            | {
                "strategy": strategy,
                "grad_accum": ga,
                "link": "slow",
                "baseline_link": "fast",
                "slowdown": r,
                "ci_low": r * 0.95,
                "ci_high": r * 1.05,
                "interval_kind": "range",
            }  # fmt: skip
        )
    base = {
        "sweep": {"sweep_id": "s1", "name": "qs", "status": "ok", "git_sha": "abc",
                  "git_dirty": False},
        "spec": {"model": "gpt2-tiny", "links": LINKS},
        "versions": {}, "baseline_link": "fast", "link_order": ["fast", "slow"],
        "runs": runs, "variants": variants, "sensitivity": sens, "step_times": [],
        "bandwidth": [], "bench_failures": [], "nodes": [], "gpus": [], "gpu_links": [],
        "link_overview": OVERVIEW,
    }  # fmt: skip
    return report.ReportData(**(base | over))


def test_headline_is_the_first_thing_after_the_title():
    data = _data()
    page = report.render_html(data, [])
    top = page[page.index("<h1>") : page.index("<nav>")]
    assert "What this sweep found" in top
    assert "ZeRO-3 is hurt most, and more as grad_accum grows" in top
    assert "slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.0601 GB/s)" in top
    assert "range of runs" in top and "repeats: 5 or more" in top
    assert "What these numbers are, and are not." in top  # the amber box, on a CPU sweep
    assert page.index("What this sweep found") < page.index("What these numbers are")


def test_links_table_shows_tc_rate_and_measured_busbw():
    html = links_html(_data())
    assert "500mbit = 0.0625 GB/s" in html and "0.0601 GB/s" in html
    assert "tc rate 500mbit" in html and "unshaped" in html
    assert "GLOO_SOCKET_IFNAME=ls-slow" in html


def test_classic_table_headers_name_the_interval_and_the_link():
    page = report.render_html(_data(), [])
    assert (
        "slow (tc 500mbit = 0.0625 GB/s; measured busbw 0.0601 GB/s): time / step [range of runs]"
        in page
    )
    assert "95% CI" not in page


def test_measured_vs_predicted_table_and_figure():
    data = _data()
    page = report.render_html(data, [])
    assert "Measured extra step time vs predicted communication time" in page
    figures = {f.name: f for f in report.build_figures(data)}
    f = figures["extra_vs_predicted.png"]
    assert f.png is not None and "diagonal" in f.note


def test_busbw_figure_draws_the_rated_rate():
    rows = [
        {"link": link, "placement": "spread", "backend": "gloo", "world_size": 2,
         "collective": "all_reduce", "msg_bytes": 2**k, "busbw_gbps": bw}
        for link, bw in (("fast", 0.2), ("slow", 0.06)) for k in (10, 20)
    ]  # fmt: skip
    fig, note = report.plot_busbw(rows, ["fast", "slow"], {"slow": 0.0625})
    (ax,) = fig.axes
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert [ln.get_ydata()[0] for ln in dashed] == [0.0625]
    assert "slow 0.0625 GB/s" in note


def test_no_caveat_box_on_a_gpu_sweep():
    runs = [r | {"backend": "nccl", "telemetry": "nvml", "throttled": False} for r in _data().runs]
    data = _data(runs=runs, gpus=[{"gpu_index": 0}], link_overview=[], spec={"links": {}})
    assert caveats_html(data) == ""


def test_throttling_is_not_checked_without_telemetry():
    runs = _data().runs
    assert throttling(runs) == "not checked (no GPU telemetry)"
    page = report.render_html(_data(), [])
    assert "No run was throttled" not in page and "unthrottled" not in page
    assert page.count("not checked (no GPU telemetry)") >= 2  # the box and the attention list
    mixed = [runs[0] | {"telemetry": "nvml", "throttled": True}, *runs[1:]]
    assert throttling(mixed) == (
        "1 of 1 checked run(s) throttled; not checked on 7 run(s) without GPU telemetry"
    )


def test_links_table_shows_the_share_of_the_rated_rate_and_flags_narrow_pcie():
    nv = {
        "sweep_id": "s1",
        "link": "nv",
        "kind": "nccl",
        "rate": None,
        "rated_gbps": 300.0,
        "rated_source": "nvlink",
        "measured_busbw_gbps": 231.0,
        "busbw_share": 0.77,
        "description": "no env change; rated: NV12: NVLink3 12 links x 25 GB/s = 300 GB/s",
    }
    slow = OVERVIEW[1] | {"rated_source": "tc", "busbw_share": 0.0601 / 0.0625}
    gpus = [
        {"node": "n1", "gpu_index": 0, "pcie_gen_current": 1, "pcie_gen_max": 4,
         "pcie_width_current": 16, "pcie_width_max": 16},
        {"node": "n1", "gpu_index": 1, "pcie_gen_current": 4, "pcie_gen_max": 4,
         "pcie_width_current": 8, "pcie_width_max": 16},
    ]  # fmt: skip
    links = LINKS | {"nv": {}}
    html = links_html(_data(link_overview=[OVERVIEW[0], slow, nv], gpus=gpus,
                            spec={"links": links}))  # fmt: skip
    assert "0.0601 GB/s = 96% of the tc rate 500mbit" in html
    assert "NVLink 300 GB/s" in html and "231 GB/s = 77% of NVLink" in html
    assert "PCIe trained below its maximum width." in html
    assert "GPU1 on n1 PCIe trained at x8 of x16" in html
    assert "when read (GPU0 on n1 gen1 of gen4): normal at idle" in html
    assert "GPU0 on n1 PCIe trained" not in html  # an idle generation is no fault
