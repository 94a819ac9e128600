"""The fleet check loop (``linksweep fleet``): nodes -> health -> groups -> per link: intra-node,
then rounds of pairs; compute probe on the last link's ranks -> verdict -> rows -> store.

Reads top to bottom; each step is one call into the module named for it: ``raycluster.fleet``
(Ray: pin probes to nodes and measure), ``fleet_plan`` (which pairs, in which rounds),
``suspects`` (the verdict), ``fleet_rows`` (results -> table rows), the store (one transaction
at the start, one at the end, so ``query`` and ``report`` work while a check runs). A
measurement that fails is a row (status and error) and the check goes on; a stop signal or
Ctrl-C stores what was measured, marked ``interrupted``, without a verdict.

Nodes that share a machine (one hostname: an emulated cluster) take turns for node checks
(``tables.waves``); nodes on different machines are measured at the same time.

Nodes are judged in groups of one device kind and GPU model (``fleet_groups``): health is read
first, at idle, since its GPU names make the groups; each group gets its message size and rule.

May import: groups, pairs, tables, orchestrator.sweep.planner, orchestrator.provenance, orchestrator.raycluster, suspects,
orchestrator.store, workloads.fleet_contract.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from orchestrator import provenance
from orchestrator.fleet import tables
from orchestrator.fleet.groups import CPU, judge_groups, node_groups, pair_msg_bytes, rule_for
from orchestrator.fleet.pairs import PairsChoice, disjoint_rounds, pair_rounds
from orchestrator.fleet.suspects import Failed, Rule, Verdict, default_rule, health_reasons
from orchestrator.store import liveness
from orchestrator.sweep.planner import link_env_defaults
from workloads.fleet_contract import ComputeRecord

MAX_MB_GPU = 64.0
"""Default all_reduce size on GPU nodes, MiB: near the plateau of busbw on NVLink and PCIe."""
MAX_MB_CPU = 4.0
"""Default on CPU nodes, MiB: gloo over a network; a few MiB time it without taking minutes."""
ITERS = 5
WARMUP = 2


@dataclass(frozen=True)
class FleetOptions:
    links: dict[str, dict[str, str]]
    """Link name -> env; ``{"default": {}}`` without ``--sweep``."""
    pairs: PairsChoice
    max_mb: float | None = None
    """None: per group (``fleet_groups``), MAX_MB_CPU for the CPU nodes, MAX_MB_GPU for GPU ones."""
    rule: Rule | None = None
    """None: per group, ``suspects.default_rule`` (CPU_REL for the CPU nodes, 0.15 for GPU ones)."""
    sweep_file: str | None = None
    seed: int = 0
    timeout_s: float = 180.0


def message_bytes(max_mb: float) -> int:
    """The all_reduce size for ``--max-mb``: the largest power of two bytes within ``max_mb``
    MiB (as ``linkbench_max_mb``; the sizes nccl-tests and our microbenchmark use), at least 4."""
    return max(4, 1 << int(math.floor(math.log2(max(max_mb * 2**20, 4)))))


def new_fleet_id(now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.timezone.utc)
    return "fleet-" + now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


Tell = Callable[..., None]
"""``tell(callback, *args)``: the check's progress, passed on to whoever watches (``--metrics``:
``fleet_started(fleet_id, n_rounds)``, ``fleet_round_finished(fleet_id, round_row)``,
``fleet_finished(fleet_id, status)``)."""


def _silent(*_args) -> None:
    return None


@dataclass
class _Measured:
    pairs: list[dict] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)
    compute: dict = field(default_factory=dict)
    health: dict = field(default_factory=dict)
    tell: Tell = _silent

    def add_round(self, row: dict) -> None:
        """A round measured (a ``fleet_rounds`` row): kept, and told."""
        self.rounds.append(row)
        self.tell("fleet_round_finished", row["fleet_id"], row)


def planned_rounds(n_waves: int, n_links: int, n_pair_rounds: int) -> int:
    """The rounds a check plans (``fleet_rounds`` rows without rechecks): health, then per link
    its ranks' start, a round per wave of node checks and each round of pairs, then the compute
    probe wave by wave."""
    return 1 + n_links * (1 + n_waves + n_pair_rounds) + n_waves


@dataclass(frozen=True)
class _Groups:
    """What the groups decide: node -> group key, group -> message size and rule."""

    of: dict[str, str]
    msg_bytes: dict[str, int]
    rules: dict[str, Rule]

    def node_sizes(self, node_ids) -> dict[str, int]:
        return {n: self.msg_bytes[self.of[n]] for n in node_ids}

    def pair_sizes(self, pairs) -> dict[tuple[str, str], int]:
        return {(a, b): pair_msg_bytes(a, b, self.of, self.msg_bytes) for a, b in pairs}


def plan_groups(nodes: Sequence, health: dict, opts: FleetOptions) -> _Groups:
    """Each node's group (``fleet_groups.node_groups``), and per group its all_reduce size
    (``--max-mb``, else the CPU or GPU default) and its rule (``--threshold``, else the
    default of its kind). Pure."""
    of = node_groups(nodes, health)
    keys = list(dict.fromkeys(of.values()))
    sizes = {
        g: message_bytes(opts.max_mb or (MAX_MB_CPU if g == CPU else MAX_MB_GPU)) for g in keys
    }
    return _Groups(of, sizes, {g: rule_for(g, opts.rule) for g in keys})


def _node_reasons(nodes: Sequence, measured: _Measured) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in nodes:
        idle = measured.health.get(n.node_id)
        reasons = []
        if idle is not None and idle.error:
            reasons.append(f"health could not be read: {idle.error}")
        gpus = list(idle.gpus) if idle is not None else []
        probe = measured.compute.get(n.node_id)
        loaded = getattr(probe, "health_under_load", None)
        if loaded is not None:
            gpus += list(loaded.gpus)
        label = n.hostname or n.ip
        reasons += health_reasons([{**g, "node": g.get("node") or label} for g in gpus])
        out[n.node_id] = list(dict.fromkeys(reasons))  # idle and under-load may say the same
    return out


def verdict_of(nodes: Sequence, measured: _Measured, groups: _Groups) -> Verdict:
    inter, intra = tables.measured_values(measured.pairs)
    compute: dict[str, float | Failed] = {}
    for n in nodes:
        probe = measured.compute.get(n.node_id)
        if isinstance(probe, ComputeRecord):
            compute[n.node_id] = probe.tokens_per_s
        elif probe is not None:  # the probe's error text
            compute[n.node_id] = Failed(str(probe))
    return judge_groups(
        [n.node_id for n in nodes],
        groups.of,
        groups.rules,
        inter,
        intra,
        compute,
        _node_reasons(nodes, measured),
        shared_host=tables.shared_hosts(nodes),
    )


def _measure_links(
    fleet_id: str,
    nodes: Sequence,
    rounds: list[list[tuple[str, str]]],
    groups: _Groups,
    opts: FleetOptions,
    measured: _Measured,
    say: Callable[[str], None],
) -> None:
    """Each link with a fresh set of ranks (NCCL reads its env once per process); the last
    link's ranks then run the compute probe, wave by wave (torch is imported there already)."""
    from orchestrator.raycluster.pinned_probes import LinkProbes

    for i, (link, env) in enumerate(opts.links.items()):
        env = {**link_env_defaults(env), **env}  # the link's own values win, as in a sweep
        with LinkProbes(list(nodes), env, timeout_s=opts.timeout_s) as probes:
            _measure_link(fleet_id, link, probes, nodes, rounds, groups, measured, say)
            if i == len(opts.links) - 1:
                say("compute probe on every node")
                _measure_compute(fleet_id, nodes, probes, opts, measured)


def _measure_link(fleet_id, link, probes, nodes, rounds, groups, measured, say) -> None:
    """One link: its ranks started, intra-node checks wave by wave, rounds of pairs, rechecks."""
    t0 = time.perf_counter()
    broken = probes.start()  # every rank's process up first: no round times start-up
    wall = time.perf_counter() - t0
    measured.add_round(tables.round_row(fleet_id, link, "start", 0, len(nodes), wall))
    for node_id, why in broken.items():
        say(f"link {link}: ranks on node {node_id} did not start: {why}")
    for w, wave in enumerate(tables.waves(nodes)):
        t0 = time.perf_counter()
        ids = [n.node_id for n in wave]
        results = probes.intra(ids, groups.node_sizes(ids), ITERS, WARMUP)
        wall = time.perf_counter() - t0
        measured.pairs += [tables.pair_row(fleet_id, link, r, None) for r in results]
        measured.add_round(tables.round_row(fleet_id, link, "intra", w, len(wave), wall))
    for i, pairs in enumerate(rounds):
        t0 = time.perf_counter()
        results = probes.round(pairs, groups.pair_sizes(pairs), ITERS, WARMUP)
        wall = time.perf_counter() - t0
        measured.pairs += [tables.pair_row(fleet_id, link, r, i) for r in results]
        measured.add_round(tables.round_row(fleet_id, link, "inter", i, len(pairs), wall))
        failed = sum(r.status != "ok" for r in results)
        say(
            f"link {link}: round {i + 1}/{len(rounds)}, {len(pairs)} pair(s) in {wall:.1f} s"
            + (f", {failed} failed" if failed else "")
        )
    _recheck(fleet_id, link, nodes, probes, groups, measured, say)


def _recheck(fleet_id, link, nodes, probes, groups: _Groups, measured: _Measured, say) -> None:
    """Measure again, once, every pair of this link the rule finds slow or failed, and keep the
    better of the two: a pair is named only when it is slow twice. On a busy network (or the
    emulated cluster, whose pairs share 2 cores) a round can be slow as a whole for a moment:
    both pairs of one round of a clean check read 35-45% low once."""
    rows = {
        (r["node_a"], r["node_b"]): i
        for i, r in enumerate(measured.pairs)
        if r["link"] == link and r["kind"] == "inter"
    }
    inter, _ = tables.measured_values([measured.pairs[i] for i in rows.values()])
    ids = [n.node_id for n in nodes]
    first = judge_groups(ids, groups.of, groups.rules, inter, {}, {}, {})
    slow = [(a, b) for (_, a, b), v in first.pairs.items() if v.slow]
    for i, pairs in enumerate(disjoint_rounds(slow)):
        t0 = time.perf_counter()
        results = probes.round(pairs, groups.pair_sizes(pairs), ITERS, WARMUP)
        wall = time.perf_counter() - t0
        measured.add_round(tables.round_row(fleet_id, link, "recheck", i, len(pairs), wall))
        for r in results:
            k = rows[(r.node_a, r.node_b)]
            again = tables.pair_row(fleet_id, link, r, None)
            measured.pairs[k] = tables.remeasured(measured.pairs[k], again)
    if slow:
        say(f"link {link}: measured {len(slow)} slow or failed pair(s) again")


def _read_health(fleet_id: str, nodes: Sequence, opts: FleetOptions, measured: _Measured) -> None:
    """Every node's health at idle, first: its GPU names make the groups."""
    from orchestrator.raycluster.pinned_probes import read_health

    t0 = time.perf_counter()
    measured.health.update(read_health(list(nodes), timeout_s=opts.timeout_s))
    measured.add_round(
        tables.round_row(fleet_id, None, "health", 0, len(nodes), time.perf_counter() - t0)
    )


def _measure_compute(fleet_id: str, nodes: Sequence, probes, opts: FleetOptions, measured) -> None:
    for w, wave in enumerate(tables.waves(nodes)):
        t0 = time.perf_counter()
        ids = [n.node_id for n in wave]
        measured.compute.update(probes.compute(ids, timeout_s=max(opts.timeout_s, 300.0)))
        wall = time.perf_counter() - t0
        measured.add_round(tables.round_row(fleet_id, None, "compute", w, len(wave), wall))


def rule_doc(rules: dict[str, Rule]) -> dict:
    """``fleet_checks.rule``: the GPU nodes' rule (else the CPU nodes'), and ``by_kind``, the
    rule of each kind of node the check judged (``cpu``; ``gpu`` for every GPU group)."""
    by_kind = {("cpu" if g == CPU else "gpu"): r.to_dict() for g, r in rules.items()}
    return {
        **by_kind.get("gpu", by_kind.get("cpu", default_rule(True).to_dict())),
        "by_kind": by_kind,
    }


def run_fleet(
    store, opts: FleetOptions, address: str, say: Callable[[str], None], tell: Tell = _silent
) -> str:
    """Check every usable node of the connected cluster; store everything; return the fleet id.

    ``store`` is a ``LiveStore``; ``tell`` hears the progress (:data:`Tell`). Raises
    ``FleetError`` when there is nothing to check.
    """
    from orchestrator.raycluster.pinned_probes import fleet_nodes

    nodes, skipped = fleet_nodes()
    if not nodes:
        raise FleetError(
            "no alive Ray node can run a probe (every node has 0 CPUs and 0 GPUs)"
            + (f"; skipped: {skipped}" if skipped else "")
        )
    fleet_id = new_fleet_id()
    ids = [n.node_id for n in nodes]
    rounds = pair_rounds(ids, opts.pairs, seed=opts.seed)
    # sizes and rules depend on the kind alone (a GPU model only splits whom a node is judged
    # against), so they are stored now, before health names the models
    kinds = plan_groups(nodes, {}, opts)
    msg_bytes = max(kinds.msg_bytes.values())
    ctx = provenance.context()
    started = time.perf_counter()
    check = {
        "fleet_id": fleet_id,
        "started_at": _now(),
        "status": "running",
        "ray_address": address,
        "driver_host": liveness.this_host(),
        "driver_pid": os.getpid(),
        "heartbeat_at": _now(),
        "git_sha": ctx["git_sha"],
        "git_dirty": ctx["git_dirty"],
        "versions": json.dumps(ctx["versions"]),
        "sweep_file": opts.sweep_file,
        "links": json.dumps([{"name": k, "env": v} for k, v in opts.links.items()]),
        "pairs_mode": opts.pairs.label(),
        "max_mb": msg_bytes / 2**20,
        "rule": json.dumps(rule_doc(kinds.rules)),
        "n_nodes": len(nodes),
        "n_rounds": len(rounds),
        "skipped_nodes": json.dumps(skipped),
    }
    with store.transaction():
        store.insert("fleet_checks", [check])
    say(
        f"fleet {fleet_id}: {len(nodes)} node(s), {len(opts.links)} link(s), pairs "
        f"{opts.pairs.label()} in {len(rounds)} round(s), all_reduce of "
        + ", ".join(
            f"{b / 2**20:g} MiB on {'CPU' if k == CPU else 'GPU'} nodes"
            for k, b in kinds.msg_bytes.items()
        )
        + (f"; skipped {len(skipped)} node(s) with nothing to run on" if skipped else "")
    )
    measured = _Measured(tell=tell)
    n_waves = len(tables.waves(nodes))
    tell("fleet_started", fleet_id, planned_rounds(n_waves, len(opts.links), len(rounds)))
    status, error, verdict = "ok", None, None
    heartbeat = store.heartbeat(fleet_id, table="fleet_checks")  # a killed driver: interrupted
    try:
        _read_health(fleet_id, nodes, opts, measured)
        groups = plan_groups(nodes, measured.health, opts)
        say("groups (judged apart): " + tables.groups_text(groups.of))
        _measure_links(fleet_id, nodes, rounds, groups, opts, measured, say)
        verdict = verdict_of(nodes, measured, groups)
    except KeyboardInterrupt:
        status, error = "interrupted", "stopped before the end: measured rows kept, no verdict"
        raise
    except Exception as exc:  # noqa: BLE001 - the check failed: store what it measured
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        heartbeat.stop()
        # a node whose health was never read (a stop before it) has no group to store
        of = {k: g for k, g in node_groups(nodes, measured.health).items() if k in measured.health}
        _store_result(store, fleet_id, nodes, of, measured, verdict, status, error, started)
        tell("fleet_finished", fleet_id, status)
    return fleet_id


def _store_result(store, fleet_id, nodes, groups, measured, verdict, status, error, started):
    pairs = measured.pairs if verdict is None else tables.judged_pair_rows(measured.pairs, verdict)
    node_rows = tables.node_rows(
        fleet_id, nodes, measured.compute, measured.health, verdict, groups
    )
    n_suspects = None
    if verdict is not None:
        n_suspects = sum(r["suspect"] is True for r in node_rows) + sum(
            r["suspect"] is True for r in pairs
        )
    with store.transaction():
        store.insert("fleet_nodes", node_rows)
        if pairs:
            store.insert("fleet_pairs", pairs)
        if measured.rounds:
            store.insert("fleet_rounds", measured.rounds)
        store.update(
            "fleet_checks",
            {"fleet_id": fleet_id},
            {
                "finished_at": _now(),
                "status": status,
                "error": error,
                "wall_s": time.perf_counter() - started,
                "n_suspects": n_suspects,
                "notes": json.dumps(list(verdict.notes) if verdict is not None else []),
            },
        )


class FleetError(RuntimeError):
    """The fleet check cannot start; the message says why."""
