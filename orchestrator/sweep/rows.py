"""Turning what a run (or a link microbenchmark) produced into table rows. Pure.

Input: the spec, the planned run and a ``raycluster.result.RunResult`` (per-rank
``workloads.contract.RankRecord``s and where each rank ran, or the failure). Output: dicts keyed
by the columns of ``orchestrator/store/schema.py``. Figures come from ``stats``, bandwidths from
``comm_model``, expected volumes and the accumulation promise from the theory the catalog names
for the run's strategy (``theories.theory_of``), transports from ``nccl_log``, link classes from
``topo``.

One job: a run's (or a link microbenchmark's) result as the rows of every table it fills.

May import: orchestrator.analysis.comm_model, orchestrator.analysis.flops, orchestrator.analysis.theories, orchestrator.topology.nccl_log, planner, spec, trace_rows, orchestrator.analysis.stats, orchestrator.topology.matrix,
orchestrator.raycluster.result, workloads.contract, workloads.model, workloads.telemetry.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.analysis import comm_model, flops, stats, theories
from orchestrator.raycluster.result import RunResult
from orchestrator.sweep import trace_rows
from orchestrator.sweep.planner import PlannedRun
from orchestrator.sweep.spec import SweepSpec
from orchestrator.topology import nccl_log
from orchestrator.topology.matrix import run_link_class
from workloads.contract import PHASES, RankRecord, TrainingRecord, noted_decisions
from workloads.model import GPT2_SIZES, N_POSITIONS
from workloads.telemetry import REASONS_UNAVAILABLE
from workloads.telemetry import summarize as summarize_telemetry

GPU_VISIBILITY = (
    "node-shared: same-node ranks see the run's distinct GPUs on that node in PCI bus order "
    "and each uses the one Ray gave it (workloads/device.py)"
)
SHARED_GPU = "shared-gpu"
"""``link_class`` of a ``ranks_per_gpu: 2`` run: two ranks on one GPU, no link between GPUs."""


@dataclass(frozen=True)
class RunRows:
    run: dict
    steps: list[dict]
    ranks: list[dict]
    comms: list[dict]
    transports: list[dict]
    telemetry: list[dict]
    phases: list[dict] = field(default_factory=list)
    nccl_logs: list[dict] = field(default_factory=list)
    traces: list[dict] = field(default_factory=list)
    trace_overlap: list[dict] = field(default_factory=list)
    trace_collectives: list[dict] = field(default_factory=list)
    trace_wait: list[dict] = field(default_factory=list)
    trace_wait_instances: list[dict] = field(default_factory=list)
    trace_lateness: list[dict] = field(default_factory=list)
    trace_files: dict[str, bytes] = field(default_factory=dict)
    """The rebased and merged traces to write before the commit (path -> gzip bytes)."""


def sweep_row(spec: SweepSpec, sweep_id: str, address: str, n_runs: int, context: dict) -> dict:
    """The ``sweeps`` row at start; ``context`` is ``provenance.context()`` (git, versions)."""
    return {
        "sweep_id": sweep_id,
        "name": spec.name,
        "spec": spec.to_json_dict(),
        "started_at": dt.datetime.now(dt.timezone.utc),
        "status": "running",
        "git_sha": context.get("git_sha"),
        "git_dirty": context.get("git_dirty"),
        "versions": context.get("versions"),
        "ray_address": address,
        "n_runs_planned": n_runs,
        "driver_host": socket.gethostname(),
    }


def _transport_facts(
    run_id: str,
    records: list[RankRecord],
    env: dict[str, str],
    link_class: str,
    leftover_logs: Mapping[str, str] | None = None,
) -> tuple[list[dict], dict]:
    """Rows for ``transports`` and the run's effective_transport / link_check / nccl_version /
    nvls / collnet.

    ``env`` is the environment the ranks ran with (what ``link_check`` judges against).
    ``leftover_logs`` are NCCL logs read from the run's nodes after it ended
    (``RunResult.nccl_logs``): a failed or hung run's only evidence. Their rows take the rank
    from each line (the rank that printed it); a rank's own log takes its record's rank.
    """
    logs = [(rec.rank, rec.nccl_log or "") for rec in records if rec.backend != "gloo"]
    logs += [(None, text) for _, text in sorted((leftover_logs or {}).items())]
    if records and {r.backend for r in records} == {"gloo"} and not leftover_logs:
        return [], {
            "effective_transport": nccl_log.GLOO_TRANSPORT,
            "link_check": "unknown",  # gloo logs no transport choice to verify against
            "nccl_version": None,
            "nvls": None,
            "collnet": None,
        }
    rows, families, version, nvls, collnet = [], set(), None, [], []
    for rank, text in logs:
        log = nccl_log.parse_nccl_log(text)
        version = version or log.nccl_version
        families.update(nccl_log.transport_families(log))
        nvls.append(nccl_log.nvls_used(log))
        collnet.append(nccl_log.collnet_used(log))
        rows.extend(
            {
                "run_id": run_id,
                "rank": line.rank if rank is None else rank,
                "channel": line.channel,
                "peer": line.peer,
                "transport": line.transport,
                "detail": line.detail,
            }
            for line in log.channels
        )
    fams = sorted(families)
    used_nvls = nccl_log.any_true(nvls)
    seen = bool(records) or bool(fams)
    return rows, {
        "effective_transport": nccl_log.effective_transport(fams) if seen else None,
        "link_check": nccl_log.link_check(env, fams, link_class, used_nvls) if seen else "unknown",
        "nccl_version": version,
        "nvls": used_nvls,
        "collnet": nccl_log.any_true(collnet),
    }


def _ran_with(run: dict, link_env: dict[str, str]) -> dict[str, str]:
    """The env the ranks ran with: ``run["rank_env"]`` (the driver's run env, stored by
    build_rows) when present, else the link's own variables."""
    env = run.get("rank_env")
    return dict(env) if isinstance(env, Mapping) and env else dict(link_env)


def _telemetry_facts(run_id: str, trained: list[tuple[int, TrainingRecord]]) -> tuple[list, dict]:
    """Rows for ``telemetry`` and the run's summary flags; absent telemetry is said, not faked.

    The throttle policy (``workloads/throttle.py``) judges each rank's GPU on its own samples:
    ``clock_reasons`` lists every reason seen, ``throttled``/``throttle_why`` only the
    excluding ones.
    """
    rows, statuses = [], set()
    by_gpu: dict[str, list] = {}
    violations: dict[str, dict[str, int]] = {}
    unavailable: list[str] = []
    for rank, t in sorted(trained, key=lambda rt: rt[0]):
        label = f"rank {rank}"
        statuses.add(t.telemetry.status)
        if REASONS_UNAVAILABLE in t.telemetry.status:
            unavailable.append(label)
        for smp in t.telemetry.samples:
            rows.append({"run_id": run_id, "rank": rank, **dataclasses.asdict(smp)})
            by_gpu.setdefault(label, []).append(smp)
        violations[label] = dict(t.telemetry.violation_ns)
    summary = summarize_telemetry(by_gpu, violations, unavailable)
    return rows, {
        "telemetry": "; ".join(sorted(statuses)) if statuses else None,
        "max_temp_c": summary.max_temp_c,
        "mean_power_w": summary.mean_power_w,
        "min_sm_clock_mhz": summary.min_sm_clock_mhz,
        "throttled": summary.throttled if summary.available else None,
        "hot": summary.hot if summary.available else None,
        "clock_reasons": summary.clock_reasons,
        "throttle_why": summary.throttle_why,
    }


def link_class_for(
    placement: str,
    placements: list,
    topo_links: Mapping,
    ranks_per_gpu: int = 1,
    gpu_uuids: Mapping[str, Mapping[str, int]] | None = None,
) -> str:
    """The link between the run's GPUs (slowest if they differ); NET across nodes;
    ``shared-gpu`` for the one-GPU rehearsal (``ranks_per_gpu`` 2: never a link measurement).
    Never raises. Ray GPU ids are indices, or UUIDs / MIG ids when the raylet's
    ``CUDA_VISIBLE_DEVICES`` held those: a UUID is found through the node's NVML inventory
    (``gpu_uuids``, :func:`gpu_uuids_by_node`); a MIG id, or a UUID not in it, makes the class
    ``unknown`` (the topology names GPUs by index)."""
    if ranks_per_gpu == 2:
        return SHARED_GPU
    if not placements:
        return "unknown"
    if placement == "spread":
        return "NET"  # ranks on different nodes talk over the network, GPUs or not
    host = placements[0].hostname
    known = (gpu_uuids or {}).get(host, {})
    indices = [_gpu_index(str(g), known) for p in placements for g in p.gpu_ids]
    if any(i is None for i in indices):
        return "unknown"
    return run_link_class(topo_links.get(host, {}), indices, placement)


def _gpu_index(gpu_id: str, uuids: Mapping[str, int]) -> int | None:
    """The NVML index of a Ray GPU id: an index itself, a UUID through the node's inventory;
    None when unknown (a MIG id, a UUID the inventory lacks). Never ``int()`` on a UUID."""
    return int(gpu_id) if gpu_id.isdigit() else uuids.get(gpu_id)


def gpu_uuids_by_node(gpus_rows) -> dict[str, dict[str, int]]:
    """``gpus`` rows (``discovery.node_rows``) -> ``{node: {uuid: gpu_index}}``, what
    :func:`link_class_for` maps UUID-form Ray GPU ids with."""
    out: dict[str, dict[str, int]] = {}
    for row in gpus_rows:
        if row.get("uuid"):
            out.setdefault(row["node"], {})[str(row["uuid"])] = int(row["gpu_index"])
    return out


def _comm_rows(run_id: str, rank: int, t: TrainingRecord, world_size: int) -> list[dict]:
    rows = []
    for c in t.comms:
        per_op_s = c.total_time_s / c.count if c.count else 0.0
        group = c.group_size or world_size  # hsdp's collectives run on sub-groups
        algbw, busbw = comm_model.bandwidths_gbps(c.op, group, c.msg_bytes, per_op_s)
        # every CommRecord field is a comms column (op, msg_bytes, count, total_time_s, dtype,
        # group_size)
        row = {"run_id": run_id, "rank": rank, **dataclasses.asdict(c), "group_size": group}
        rows.append(row | {"algbw_gbps": algbw, "busbw_gbps": busbw})
    return rows


def _comm_facts(spec: SweepSpec, planned: PlannedRun, trained, link_algbw) -> dict:
    """Measured bytes per step (max over ranks), the theory's expectation, predicted seconds."""
    first = trained[0][1] if trained else None
    out = {
        "comm_bytes_per_step": None,
        "expected_comm_bytes_per_step": None,
        "comm_note": None,
        "predicted_comm_s_per_step": None,
    }
    if first is None:
        return out
    if first.profile_steps:
        out["comm_bytes_per_step"] = max(
            sum(c.msg_bytes * c.count for c in t.comms) / t.profile_steps for _, t in trained
        )
        if link_algbw:
            per_step = [(c.op, c.msg_bytes, c.count / first.profile_steps) for c in first.comms]
            out["predicted_comm_s_per_step"] = comm_model.predict_comm_s(per_step, link_algbw)
    theory = _theory(spec, planned.variant, trained)
    return out | {"expected_comm_bytes_per_step": theory.bytes_per_step, "comm_note": theory.note}


def _theory(spec: SweepSpec, v, trained) -> theories.Theory:
    """The run's theory (the one its strategy's catalog entry names): from its variant, the
    spec's ranks, precision and model, and rank 0's parameters and effective DeepSpeed config
    (none where no rank reported)."""
    rank0 = _rank0(trained) if trained else None
    facts = theories.TheoryFacts(
        variant=v.to_dict(),
        world_size=spec.world_size,
        precision=spec.precision,
        model=spec.model,
        n_params=rank0.n_params if rank0 else None,
        ds_config=rank0.ds_config if rank0 else None,
    )
    return theories.theory_of(facts)


def _accumulation_facts(spec: SweepSpec, v, trained) -> dict:
    """The accumulation check: what the non-final micro-batches sent (rank 0, per step), what
    the strategy and flavour promise (the theory's ``non_final``, outside its ``ignore``d ops),
    and the verdict (``comm_model.accumulation_verdict``); where the theory makes no promise,
    the verdict says why (``unchecked: ...``)."""
    rank0 = _rank0(trained) if trained else None
    measured = rank0.non_final_bytes if rank0 else None
    theory = _theory(spec, v, trained)
    promised = theory.non_final
    verdict = comm_model.accumulation_verdict(
        measured, promised, v.grad_accum, theory.ignore, theory.no_promise_why
    )
    return {
        "non_final_bytes": measured,
        "promised_non_final_bytes": dict(promised) if promised is not None else None,
        "accum_check": verdict,
    }


def _rank0(trained: list[tuple[int, TrainingRecord]]) -> TrainingRecord:
    return min(trained, key=lambda rt: rt[0])[1]


def gpus_used(placements: list, world_size: int, ranks_per_gpu: int = 1) -> int:
    """Distinct (node, Ray GPU id) pairs of a run's ranks: two ranks sharing a GPU count once.
    CPU ranks count one each (a rank's CPU share is what its TFLOP/s is per); no placements (a
    run that failed before them): the plan's ``world_size / ranks_per_gpu``."""
    used = {(p.node_id, str(g)) for p in placements for g in p.gpu_ids}
    if used or placements:
        return len(used) or world_size
    return max(1, world_size // ranks_per_gpu)


def _efficiency_facts(spec: SweepSpec, planned: PlannedRun, trained, figures, placements) -> dict:
    """Model FLOPs per step, TFLOP/s per distinct GPU (:func:`gpus_used`) and MFU (flops.py)."""
    rank0 = _rank0(trained) if trained else None
    n_layer, _, d_model = GPT2_SIZES[spec.model]
    return {
        "gpu_name": rank0.device_name if rank0 else None,
        **flops.efficiency(
            n_params=rank0.n_params if rank0 else None,
            n_layer=n_layer,
            d_model=d_model,
            n_positions=N_POSITIONS,
            seq_len=spec.seq_len,
            tokens_per_step=spec.micro_batch_size
            * planned.variant.grad_accum
            * spec.seq_len
            * spec.world_size,
            gpus=gpus_used(placements, spec.world_size, spec.ranks_per_gpu),
            median_step_time_s=figures.get("median_step_time_s"),
            precision=spec.precision,
            gpu_name=rank0.device_name if rank0 else None,
            tf32=rank0.tf32 if rank0 else False,
            peak_override=spec.peak_tflops,
        ),
    }


@dataclass(frozen=True)
class RunFacts:
    """What a run's rows record besides what it produced (``RunResult``): which run of which
    sweep, when, with which env, and what the sweep knew of the cluster."""

    spec: SweepSpec
    sweep_id: str
    planned: PlannedRun
    run_id: str
    started_at: dt.datetime
    finished_at: dt.datetime
    rank_env: Mapping[str, str] | None = None
    """The env the driver started every rank with (``planner.Launch.env``; per-rank values in
    their ``{rank}`` form), stored as ``runs.rank_env``."""
    topo_links: Mapping | None = None
    """Each node's GPU links (``discovery.links_by_node``), the run's link class is read from."""
    gpu_uuids: Mapping[str, Mapping[str, int]] | None = None
    """Each node's GPU UUIDs -> indices (:func:`gpu_uuids_by_node`), for UUID-form Ray GPU ids."""
    link_algbw: comm_model.AlgbwBySize | None = None
    """The run's link's measured algbw per (op, size); None: no communication time predicted."""
    trace_dir: str | None = None
    """Where the run's traces are kept (``trace_rows.trace_dir_for``); None: not kept."""


def build_rows(facts: RunFacts, result: RunResult) -> RunRows:
    """Turn one run's ``RunResult`` into table rows. Pure: each rank's rows, the run's row, then
    what the run's NCCL logs (its transports) and telemetry add to it."""
    spec, run_id, v = facts.spec, facts.run_id, facts.planned.variant
    records: list[RankRecord] = result.rank_records
    trained = [(r.rank, r.training) for r in records if r.training is not None]
    steps, ranks, comms = _rank_rows(run_id, result, spec.world_size)
    run = _run_row(facts, result, trained)
    link_class = link_class_for(
        v.placement, result.placements, facts.topo_links or {}, spec.ranks_per_gpu, facts.gpu_uuids
    )
    transports, t_facts = _transport_facts(
        run_id, records, _ran_with(run, spec.links[v.link]), link_class, result.nccl_logs
    )
    telemetry, tel_facts = _telemetry_facts(run_id, trained)
    tr = trace_rows.trace_facts(run_id, trained, run.get("median_step_time_s"), facts.trace_dir)
    run.update({"link_class": link_class, **t_facts, **tel_facts, **tr.run})
    logs = [(f"rank {r.rank}", r.nccl_log) for r in records if r.nccl_log]
    logs += sorted(result.nccl_logs.items())  # a failed or hung run's, read from its nodes
    return RunRows(
        run, steps, ranks, comms, transports, telemetry, phase_rows(run_id, result),
        [{"run_id": run_id, "source": s, "text": t} for s, t in logs], tr.traces, tr.overlap,
        tr.collectives, tr.wait, tr.wait_instances, tr.lateness, tr.files,
    )  # fmt: skip


def _rank_rows(run_id: str, result: RunResult, world_size: int) -> tuple[list, list, list]:
    """``steps``, ``ranks`` and ``comms`` rows: each rank's steps, node and collectives."""
    placement_of = {p.rank: p for p in result.placements}
    steps, ranks, comms = [], [], []
    for rec in result.rank_records:
        t = rec.training
        for s in t.steps if t else ():
            steps.append({"run_id": run_id, "rank": rec.rank, **dataclasses.asdict(s)})
        where = placement_of.get(rec.rank)
        ranks.append(
            {
                "run_id": run_id,
                "rank": rec.rank,
                "node_id": where.node_id if where else None,
                "hostname": where.hostname if where else None,
                "local_rank": rec.local_rank,
                "device": rec.device,
                "peak_mem_bytes": t.peak_mem_bytes if t else None,
            }
        )
        if t:
            comms.extend(_comm_rows(run_id, rec.rank, t, world_size))
    return steps, ranks, comms


def _run_row(facts: RunFacts, result: RunResult, trained: list) -> dict:
    """The ``runs`` row but its link class, transports and telemetry (:func:`build_rows`): the
    run and its variant, the spec's settings, status and times, where its ranks ran, its
    figures (``stats.run_figures``), communication and efficiency."""
    spec, planned, v = facts.spec, facts.planned, facts.planned.variant
    records = result.rank_records
    first = trained[0][1] if trained else None
    startup = None
    if result.actors_created_wall_s and trained:
        startup = max(t.first_step_wall_s for _, t in trained) - result.actors_created_wall_s
    timed = {rank: [s for s in t.steps if not s.warmup] for rank, t in trained}
    figures = stats.run_figures(timed)
    return {
        "run_id": facts.run_id,
        "sweep_id": facts.sweep_id,
        "seq": planned.seq,
        **v.to_dict(),
        "link_env": spec.links[v.link],
        "world_size": spec.world_size,
        "model": spec.model,
        "n_params": first.n_params if first else None,
        "precision": spec.precision,
        "seq_len": spec.seq_len,
        "micro_batch_size": spec.micro_batch_size,
        "steps": spec.steps,
        "warmup_steps": spec.warmup_steps,
        "repeat": planned.repeat,
        "backend": records[0].backend if records else None,
        "status": "ok" if result.error is None else "failed",
        "error": result.error,
        "started_at": facts.started_at,
        "finished_at": facts.finished_at,
        "startup_s": startup,
        "nodes": _nodes(result.placements, records, result.error),
        "gpu_visibility": GPU_VISIBILITY
        if any(p.visible_gpus for p in result.placements)
        else "cpu: no GPUs assigned",
        "data_source": first.data_source if first else None,
        "tokenizer": first.tokenizer if first else None,
        "peak_mem_bytes": max((t.peak_mem_bytes for _, t in trained), default=None),
        # each rank counts its own swap folders: the run's files are their sum
        "nvme_swap_files": sum(t.nvme_swap_files for _, t in trained) if trained else None,
        "variant": v.to_dict(),
        "ds_config": _rank0(trained).ds_config if trained else None,
        "optimizer_impl": _rank0(trained).optimizer_impl if trained else None,
        **_compile_facts(trained),
        "launcher": result.launcher,
        "rank_env": dict(facts.rank_env) if facts.rank_env is not None else None,
        "ranks_per_gpu": spec.ranks_per_gpu,
        "ranks_per_node": ranks_per_node(spec, v.placement),
        **_comm_facts(spec, planned, trained, facts.link_algbw),
        **_accumulation_facts(spec, v, trained),
        **figures,
        **_efficiency_facts(spec, planned, trained, figures, result.placements),
    }


def _compile_facts(trained: list[tuple[int, TrainingRecord]]) -> dict:
    """A compiled run's backend, inductor cache state and graph calls (rank 0's), and its
    recompiles (the most any rank had); all NULL for an eager run."""
    first = _rank0(trained) if trained else None

    def most(name: str) -> int | None:
        values = [getattr(t, name) for _, t in trained if getattr(t, name) is not None]
        return max(values, default=None)

    return {
        "compile_backend": first.compile_backend if first else None,
        "compile_cache": first.compile_cache if first else None,
        "recompiles_timed": most("recompiles_timed"),
        "recompiles_profiled": most("recompiles_profiled"),
        "graph_calls_timed_step": first.graph_calls_timed_step if first else None,
        "graph_calls_profiled_step": first.graph_calls_profiled_step if first else None,
    }


def ranks_per_node(spec: SweepSpec, placement: str) -> int:
    """The ranks each node of a run holds: all of them packed; spread, ``ranks_per_node``
    (default one)."""
    return spec.world_size if placement == "pack" else spec.ranks_per_node or 1


def _nodes(placements: list, records: list[RankRecord], error: str | None = None) -> list[dict]:
    """``runs.nodes``: where each rank ran, with the device it chose (``device_decision``). A
    rank with no record (it failed) gets the decision its error text names
    (``contract.noted_decisions``), else None (it failed before deciding, or the text lacks
    its note). ``visible_gpus``: the node's distinct GPUs (a shared GPU once)."""
    chose = {**noted_decisions(error), **{r.rank: r.device_decision for r in records}}
    return [
        {
            **dataclasses.asdict(p),
            "visible_gpus": tuple(dict.fromkeys(p.visible_gpus)) if p.visible_gpus else None,
            "device_decision": dataclasses.asdict(d) if (d := chose.get(p.rank)) else None,
        }
        for p in placements
    ]


def build_rows_safely(facts: RunFacts, result: RunResult) -> RunRows:
    """:func:`build_rows`; when that raises (a record it cannot read, a bug), the run's rows
    are those of a failed run whose error says why, so one run's rows never abort the sweep."""
    try:
        return build_rows(facts, result)
    except Exception as exc:  # noqa: BLE001 - stored as the run's error, the sweep goes on
        error = f"building the run's rows failed: {type(exc).__name__}: {exc}"
        if result.error:
            error += f"\nthe run's own error: {result.error}"
        failed = RunResult(error=error, launcher=result.launcher)
        bare = dataclasses.replace(facts, topo_links=None, link_algbw=None, gpu_uuids=None)
        return build_rows(bare, failed)


def phase_rows(run_id: str, result: RunResult) -> list[dict]:
    """``run_phases`` rows: the driver's phases (rank NULL), then each rank's, in PHASES order.
    A rank's process_start is its actor's creation minus the driver's request for the actors."""
    order = {p: i for i, p in enumerate(PHASES)}
    rows = [
        {"run_id": run_id, "rank": None, "phase": p, "seconds": s}
        for p, s in result.driver_phases.items()
    ]
    for rec in result.rank_records:
        seconds: dict[str, float] = {}
        if result.actors_created_wall_s is not None:
            seconds["process_start"] = rec.created_wall_s - result.actors_created_wall_s
        timings = [*rec.phases, *(rec.training.phases if rec.training else ())]
        for t in timings:
            seconds[t.phase] = seconds.get(t.phase, 0.0) + t.seconds
        rows.extend(
            {"run_id": run_id, "rank": rec.rank, "phase": p, "seconds": s}
            for p, s in seconds.items()
        )
    return sorted(rows, key=lambda r: (r["rank"] is not None, r["rank"] or 0, order[r["phase"]]))


def commit_phase_row(run_id: str, seconds: float) -> dict:
    """The driver's ``commit`` phase: the run's transaction, timed after it (stored apart)."""
    return {"run_id": run_id, "rank": None, "phase": "commit", "seconds": seconds}


def linkbench_rows(
    sweep_id: str, link: str, placement: str, world_size: int, result: RunResult
) -> list[dict]:
    """One row per (collective, size, timed iteration); a failed benchmark is one failed row."""
    base = {"sweep_id": sweep_id, "link": link, "placement": placement, "world_size": world_size,
            "source": "linksweep"}  # fmt: skip
    empty = dict.fromkeys(
        ("backend", "op", "msg_bytes", "iteration", "time_s", "algbw_gbps", "busbw_gbps")
    )
    if result.error is not None or not result.rank_records:
        return [{**base, **empty, "status": "failed", "error": result.error}]
    rows = []
    for rec in result.rank_records[0].linkbench:  # every rank returns the same records
        head = {**base, **empty, "backend": rec.backend, "op": rec.op, "msg_bytes": rec.msg_bytes}
        if rec.skipped_reason:
            rows.append({**head, "status": "skipped", "error": rec.skipped_reason})
            continue
        for i, t in enumerate(rec.times_s):
            algbw, busbw = comm_model.bandwidths_gbps(rec.op, world_size, rec.msg_bytes, t)
            rows.append(
                {
                    **head,
                    "iteration": i,
                    "time_s": t,
                    "algbw_gbps": algbw,
                    "busbw_gbps": busbw,
                    "status": "ok",
                    "error": None,
                }
            )
    return rows
