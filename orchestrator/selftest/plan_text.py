"""``linksweep selftest --dry-run``'s text, pure: the plan (``orchestrator/selftest/plan.py``
:class:`SelftestPlan`) as plain lines: the nodes as the plan saw them, every check with run or
skip and why, the nodes and GPUs it runs on and its sweep, then the time it should take and the
latest it can end. Plain text (no table drawing), so a test or a script can read it.

May import: plan.
"""

from __future__ import annotations

from orchestrator.selftest.plan import NodeFacts, SelftestPlan, estimate_sweep_s, planned_runs


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min"


def _node_line(n: NodeFacts) -> str:
    if n.error is not None:
        return f"  {n.hostname} {n.ip}: probe failed: {n.error}"
    names = sorted(set(n.gpu_names))
    kinds = ", ".join(f"{n.gpu_names.count(g)}x {g}" for g in names) or "no GPU"
    return (
        f"  {n.hostname} {n.ip}: {n.cpus:g} CPUs; {kinds}; Ray offers {n.ray_gpus:g} GPU(s); "
        f"CUDA {'yes' if n.cuda_available else 'no'}; "
        f"nvidia-smi {'yes' if n.nvidia_smi else 'no'}"
    )


def plan_text(plan: SelftestPlan) -> str:
    """The dry run's output: what ``linksweep selftest`` with the same options would do here."""
    lines = [
        f"selftest plan ({'--quick, ' if plan.quick else ''}mode {plan.mode}; "
        f"most GPUs Ray offers on one CUDA node: {plan.n_gpus})",
        f"nodes ({len(plan.nodes)}):",
        *(_node_line(n) for n in plan.nodes),
        "checks:",
    ]
    width = max(len(c.check) for c in plan.checks)
    for c in plan.checks:
        if not c.run:
            lines.append(f"  {c.check:<{width}}  skip: {c.why_not}")
            continue
        where = ", ".join(c.nodes) or "no node"
        gpus = f", {c.gpus} GPU(s) a run" if c.gpus else ""
        sweep = f", sweep {c.sweep}" if c.sweep else ""
        lines.append(f"  {c.check:<{width}}  run on {where}{gpus}{sweep}")
    lines.append("sweeps:")
    for key, spec in plan.sweeps.items():
        runs = planned_runs(spec)
        what = ", ".join(f"{s} ga {g}" for s, g in runs)
        launcher = f", launcher {spec['launcher']}" if "launcher" in spec else ""
        lines.append(
            f"  {key}: {len(runs)} run(s) ({what}), world_size {spec['world_size']}{launcher}, "
            f"{spec['model']} {spec['precision']}, {spec['steps']} timed steps, "
            f"run_timeout_s {spec['run_timeout_s']:g}, about {_duration(estimate_sweep_s(spec))}"
        )
    if plan.fleet:
        lines.append(f"fleet check: on {len(plan.nodes)} node(s), --pairs all")
    else:
        lines.append("fleet check: not run (--quick)")
    lines.append(
        f"time: about {_duration(plan.estimate_s)} expected; at most {_duration(plan.bound_s)} "
        "(every run reaching its run_timeout_s)"
    )
    return "\n".join(lines)
