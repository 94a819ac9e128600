"""docs/schema.md, generated from the real schema so it cannot go stale.

``python -m orchestrator.store.schema_doc > docs/schema.md`` builds the schema in an in-memory
database, reads every table's and view's columns and types back, and writes them with their
meaning: for a table column, the ``--`` comment next to it in ``schema.py``; for a view column,
``VIEW_COLUMNS`` below, else the comment of the table column of the same name; a key column
(an axis of the variant key), its catalog entry's ``doc`` (``workloads/catalog.py``).
``tests/unit/test_docs.py`` checks the file against the schema in both directions.

May import: db, schema, workloads.catalog.
"""

from __future__ import annotations

import re

from orchestrator.store.db import Store
from orchestrator.store.schema import SCHEMA_VERSION, TABLES, VIEWS
from workloads import catalog

TABLE_ROWS = {
    "meta": "key (schema_version)",
    "sweeps": "sweep (one `linksweep run`)",
    "runs": "run (one variant x one repeat), with its figures",
    "steps": "rank x optimizer step (warmup steps flagged)",
    "ranks": "rank of a run",
    "comms": "run x rank x collective op x message size x dtype (the profiled step)",
    "nodes": "node of a sweep (topology probe)",
    "gpus": "GPU of a node (NVML inventory)",
    "gpu_links": "GPU pair of a node (`nvidia-smi topo -m` class: NV#, PIX, PHB, SYS, ...)",
    "transports": "NCCL channel of a rank (parsed NCCL_DEBUG=INFO log)",
    "nccl_logs": "NCCL log of a run (one per rank, or per leftover file of a failed run)",
    "telemetry": "NVML sample of a rank (every 0.25 s)",
    "traces": "traced rank of a run: its profiler trace's file",
    "trace_overlap": "traced rank x step of a run (and the whole trace): communication, compute, overlap",
    "trace_collectives": "traced rank x step x collective: what was called, what ran, busy and exposed time",
    "link_bench": "link microbenchmark iteration",
    "variant_stats": "variant (stored by orchestrator/analysis/stats.py; read through variant_summary)",
    "sensitivity_stats": "variant x non-baseline link (read through link_sensitivity)",
    "baselines": "named baseline: a sweep later ones are compared with",
    "link_descriptions": "link of a sweep (what it physically is, recorded at sweep start)",
    "fleet_checks": "fleet check (one `linksweep fleet`)",
    "fleet_nodes": "node of a fleet check: compute probe, health, verdict",
    "fleet_pairs": "measured pair of a fleet check x link (intra-node: node_b = node_a)",
    "fleet_rounds": "timed stage of a fleet check x link (a round of pairs, or a node stage)",
}
VIEW_ROWS = {
    "step_times": "timed step of a run (max over ranks, warmup excluded)",
    "run_summary": "run",
    "variant_summary": "variant: sweep x " + " x ".join(catalog.variant_key()),
    "link_sensitivity": "variant x non-baseline link",
    "link_bandwidth": "sweep x link x placement x collective x message size",
    "link_overview": "link of a sweep: described, rated and measured",
    "fleet_suspects": "suspect of a fleet check: a node, or a single slow pair",
    "trace_exposure": "traced variant x link: measured exposed communication beside the fit",
    "trace_collective_exposure": "traced variant x link x collective: its busy and exposed time",
}
INTERVAL = (
    "range: min-max of the runs (fewer than 5 included runs); bootstrap95: 95% percentile "
    "bootstrap of the median (5 runs or more)"
)
VIEW_COLUMNS = {
    ("step_times", "step_time_s"): "the slowest rank's time for this step",
    ("step_times", "samples"): "samples of all ranks in this step",
    ("step_times", "tokens"): "tokens of all ranks in this step",
    ("step_times", "loss"): "mean loss over ranks",
    ("variant_summary", "median_step_time_s"): "median over included runs of each run's figure",
    ("variant_summary", "ci_low_s"): "low end of the interval of the median; kind: interval_kind",
    ("variant_summary", "ci_high_s"): "high end of the interval; kind: interval_kind",
    ("variant_summary", "interval_kind"): INTERVAL,
    ("variant_summary", "n_runs"): "runs of the variant, excluded ones included",
    ("variant_summary", "n_excluded"): "failed or throttled runs (kept, not in figures)",
    ("link_sensitivity", "slowdown"): "median step time on the link / on the baseline link",
    ("link_sensitivity", "ci_low"): "low end of the slowdown's interval; kind: interval_kind",
    ("link_sensitivity", "ci_high"): "high end of the slowdown's interval",
    ("link_sensitivity", "interval_kind"): INTERVAL.replace("the runs", "run-pair ratios"),
    ("link_bandwidth", "collective"): "all_reduce | all_gather | reduce_scatter (nccl-tests "
    "imports also all_to_all | broadcast | reduce)",
    ("link_bandwidth", "source"): "linksweep (our microbenchmark) | nccl-tests (imported: "
    "its printed figures); never pooled",
    ("link_bandwidth", "in_place"): "nccl-tests' in-place columns (true) or out-of-place "
    "(false); NULL for linksweep's",
    ("link_bandwidth", "iterations"): "timed iterations (nccl-tests: repeats of the size in "
    "the file, usually 1)",
    ("link_bandwidth", "time_s"): "median over iterations of the slowest rank's time",
    ("link_bandwidth", "algbw_gbps"): "msg_bytes / time_s, GB/s (1e9 B/s)",
    ("link_bandwidth", "busbw_gbps"): "algbw x 2(n-1)/n (all_reduce) or x (n-1)/n, GB/s",
    ("link_overview", "measured_msg_bytes"): "largest all_reduce message measured",
    ("link_overview", "measured_busbw_gbps"): "all_reduce busbw at that size, GB/s",
    ("link_overview", "busbw_share"): "measured busbw / rated_gbps (both GB/s, one way)",
    ("link_overview", "link_classes"): "topology classes of the link's runs (NV#, PHB, NET, ...)",
    ("link_overview", "transports"): "transports NCCL (or gloo) used on the link's runs",
    ("run_summary", "n_steps"): "timed steps (0 for a failed run)",
    ("trace_exposure", "n_runs"): "traced ok runs of the variant on the link",
    ("trace_exposure", "measured_exposed_s"): "exposed communication per step (s): per traced "
    "step the slowest rank's, median over steps, median over runs",
    ("trace_exposure", "measured_low_s"): "lowest run's figure (range of the runs)",
    ("trace_exposure", "measured_high_s"): "highest run's figure",
    ("trace_exposure", "measured_comm_s"): "communication busy per step (s), the same way",
    ("trace_exposure", "predicted_comm_s"): "link model: communication time predicted on the "
    "link (median over its runs)",
    ("trace_exposure", "fitted_exposure"): "link model: fitted share of it not hidden",
    ("trace_exposure", "fitted_exposed_s"): "fitted_exposure x predicted_comm_s",
    ("trace_exposure", "fitted_low_s"): "the exposure interval's low end x predicted_comm_s",
    ("trace_exposure", "fitted_high_s"): "the exposure interval's high end x predicted_comm_s",
    ("trace_exposure", "diff_s"): "measured_exposed_s - fitted_exposed_s",
    ("trace_exposure", "fit_quality"): "the link model's quality for the variant group",
    ("trace_collective_exposure", "n_runs"): "traced ok runs of the variant on the link",
    ("trace_collective_exposure", "per_step_n"): "intervals of this collective per traced step",
    ("trace_collective_exposure", "per_step_msg_bytes"): "their message bytes per step "
    "(collective recorder; NULL where its step could not be laid over)",
    ("trace_collective_exposure", "busy_s"): "per step the slowest rank's busy time of this "
    "collective (union of its intervals), median over steps and runs",
    ("trace_collective_exposure", "exposed_s"): "the same for its part no compute ran beside",
    ("trace_collective_exposure", "exposed_low_s"): "exposed_s: lowest run",
    ("trace_collective_exposure", "exposed_high_s"): "exposed_s: highest run",
}


VIEW_SOURCE = {
    "step_times": "steps",
    "run_summary": "runs",
    "variant_summary": "variant_stats",
    "link_sensitivity": "sensitivity_stats",
    "link_bandwidth": "link_bench",
    "link_overview": "link_descriptions",
    "trace_exposure": "trace_overlap, runs, link_model, link_model_check",
    "trace_collective_exposure": "trace_collectives, runs",
}
COMMON = {
    "sweep_id": "the sweep (`sweeps.sweep_id`, e.g. 20261122-073748-e8d5eb)",
    "run_id": "the run (`runs.run_id`)",
    "baseline_link": "the link slowdowns are measured against",
    "world_size": "ranks",
    "rank": "global rank",
    "step": "optimizer step index",
    "model": "gpt2 | gpt2-medium | gpt2-large | gpt2-xl | gpt2-tiny",
    "precision": "fp32 | bf16",
    "repeat": "1..repeats",
    "backend": "nccl | gloo",
    "status": "ok | failed",
    "error": "error text of a failed run or op",
    "throttled": "GPU clock throttled during the run (NULL: no telemetry)",
    "hot": "GPU above 80 C during the run",
    "link_class": "topology class between the run's GPUs (NV#, PIX, PHB, SYS, NET, unknown)",
    "effective_transport": "what NCCL really used (P2P, SHM, NET/Socket, NET/IB) or gloo/tcp",
    "p10_step_time_s": "10th percentile over timed steps (slowest rank per step)",
    "p90_step_time_s": "90th percentile over timed steps (slowest rank per step)",
    "tokens_per_s": "tokens of all ranks / sum of step times",
    "samples_per_s": "samples of all ranks / sum of step times",
    "expected_comm_bytes_per_step": "analytic expectation (orchestrator/analysis/comm_model.py)",
    "predicted_comm_s_per_step": "measured collectives priced at the link's measured bandwidth",
    "peak_mem_bytes": "peak memory over the timed steps (GPU allocator on GPU, peak RSS on CPU); max over ranks/runs",
    "op": "all_reduce | all_gather | reduce_scatter | ...",
    "msg_bytes": "message size (nccl-tests convention: the whole buffer)",
    "algbw_gbps": "msg_bytes / time, GB/s (1e9 B/s)",
    "busbw_gbps": "algbw x 2(n-1)/n (all_reduce) or x (n-1)/n, GB/s",
    "node": "hostname",
    "comm_bytes_per_step": "measured message bytes per optimizer step per rank",
    "median_step_time_s": "median over timed steps of the slowest rank's step time",
    "slowdown": "median step time on the link / on the baseline link",
    "n_runs": "runs of the variant, excluded ones included",
    "n_excluded": "failed or throttled runs (kept, not in figures)",
    "warmup": "a warmup step (stored, never in figures)",
    "spec": "the validated sweep file (JSON)",
    "versions": "package versions (torch, ray, deepspeed, ...)",
    "link_env": "env vars the link set on every rank",
    "variant": "the variant's grid values (JSON)",
    "step_time_s": "seconds for one optimizer step on this rank",
    "n_params": "parameters trained",
    "nccl_version": "NCCL version from the rank's log",
    "data_source": "wikitext-2-raw-v1 or builtin (fallback)",
    "tokenizer": "gpt2 or byte-level fallback",
    "git_sha": "commit of the code that ran",
    "git_dirty": "uncommitted changes at run time",
    "ray_address": "the Ray cluster (embedded: a single-node Ray on the driver)",
    "max_temp_c": "max GPU temperature during timed steps",
    "mean_power_w": "mean GPU power during timed steps",
    "min_sm_clock_mhz": "min SM clock during timed steps",
    "started_at": "UTC",
    "finished_at": "UTC",
}


def axis_meaning(axis: catalog.Axis) -> str:
    """A key column's meaning: its catalog entry's doc, and its value where it does not apply."""
    where = f" Where it does not apply: {axis.na}." if axis in catalog.knob_axes() else ""
    return f"{axis.doc}{where}"


COMMON |= {a.name: axis_meaning(a) for a in catalog.AXES.values()}


def table_comments() -> dict[tuple[str, str], str]:
    """(table, column) -> the ``--`` comment on its line in ``schema.TABLES``."""
    out = {}
    for table, cols in TABLES.items():
        for line in cols.splitlines():
            m = re.match(r'\s*"?([a-z_0-9]+)"?\s+[A-Z]+[^-]*--\s*(.+)$', line)
            if m:
                out[(table, m.group(1))] = m.group(2).strip()
    return out


def columns() -> dict[str, list[tuple[str, str]]]:
    """Every table and view -> [(column, type)], read from a fresh in-memory database."""
    out = {}
    with Store(":memory:") as s:
        for name in [*TABLES, *VIEWS]:
            _, rows = s.query(f"DESCRIBE {name}")
            out[name] = [(r[0], r[1]) for r in rows]
    return out


def _meaning(name: str, col: str, comments: dict) -> str:
    for key in ((name, col), (VIEW_SOURCE.get(name), col)):
        if key in VIEW_COLUMNS:
            return VIEW_COLUMNS[key]
        if key in comments:
            return comments[key]
    return COMMON.get(col, "")


def render() -> str:
    cols = columns()
    comments = table_comments()
    out = [
        "# The results database",
        "",
        "<!-- Generated by `python -m orchestrator.store.schema_doc > docs/schema.md`; "
        "tests/unit/test_docs.py fails when it differs from the schema. Do not edit by hand. -->",
        "",
        f"Schema version {SCHEMA_VERSION}. Tables hold what was measured; views select and join "
        "them (the figures are computed once, by `orchestrator/analysis/stats.py`, and stored). Query "
        'them with `linksweep query "SQL"`; export them with `linksweep export`.',
        "",
        "## Views",
        "",
    ]
    for kind, names, rows_of in (("view", VIEWS, VIEW_ROWS), ("table", TABLES, TABLE_ROWS)):
        if kind == "table":
            out += ["## Tables", ""]
        for name in names:
            out += [f"### `{name}` ({kind})", "", f"One row per {rows_of.get(name, '?')}.", ""]
            out += ["| column | type | meaning |", "| --- | --- | --- |"]
            for col, typ in cols[name]:
                meaning = _meaning(name, col, comments).replace("|", "\\|")
                out.append(f"| `{col}` | {typ} | {meaning} |")
            out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
