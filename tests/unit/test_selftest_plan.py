"""``linksweep selftest``'s plan and verdict (orchestrator/selftest/plan.py,
orchestrator/selftest/verdicts.py) on planted facts: the sweep files each mode writes are valid
sweep files, a check needing CUDA reads ``not run: no CUDA`` without it, and each failure a real
node could show is a ``fail`` naming it.
"""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from orchestrator.cli import build_parser
from orchestrator.fleet import tables
from orchestrator.selftest import plan, startup
from orchestrator.selftest import verdicts as verdict
from orchestrator.selftest.fleet_facts import FleetFacts
from orchestrator.sweep.planner import expand_grid
from orchestrator.sweep.spec import parse_spec
from workloads.fleet_contract import ComputeRecord, HealthRecord


def _run(sweep, strategy="ddp", ga=1, **over) -> dict:
    row = {
        "sweep": plan.sweep_name(sweep),
        "run_id": f"{sweep}-{strategy}-{ga}",
        "launcher": {"one_rank_alt": "actors"}.get(sweep, "fork"),
        "strategy": strategy,
        "grad_accum": ga,
        "offload": "none",
        "world_size": 2,
        "status": "ok",
        "error": None,
        "backend": "gloo",
        "n_steps": 2,
        "tokens_per_s": 900.0,
        "mfu": None,
        "peak_tflops": None,
        "peak_source": "cpu: no MFU",
        "peak_mem_bytes": None,
        "telemetry": "absent: no GPU",
        "link_class": None,
        "ranks_per_gpu": 1,
        "nvme_swap_files": None,
        "gpu_name": None,
        "effective_transport": "gloo/tcp",
        "nccl_version": None,
        "grad_sync": None,
        "comm_bytes_per_step": None,
        "expected_comm_bytes_per_step": None,
        "comm_note": None,
        "accum_check": None,
    }
    return row | over


FSDP2_BYTES = 2_621_440.0
"""A planted FSDP2 run's bytes per step, measured and expected alike."""


def _fsdp2_run(**over) -> dict:
    """The FSDP2 check's one run as a good node stores it: bytes equal theory, check ok."""
    good = {"grad_sync": "last", "comm_bytes_per_step": FSDP2_BYTES,
            "expected_comm_bytes_per_step": FSDP2_BYTES, "comm_note": "FSDP2 theory",
            "accum_check": "ok"}  # fmt: skip
    return _run("fsdp2", "fsdp", 2, **good) | over


def _gpu(row: dict) -> dict:
    return row | {
        "backend": "nccl",
        "mfu": 0.31,
        "peak_tflops": 989.0,
        "peak_source": "bf16: NVIDIA H100 SXM5 datasheet",
        "peak_mem_bytes": 9_000_000_000,
        "telemetry": "nvml",
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "effective_transport": "P2P",
    }


def _stack(run_id: str, rank: int, trace: bool = False) -> dict:
    return {"run_id": run_id, "rank": rank, "hostname": "n", "has_stack": True,
            "has_nccl_trace": trace, "error": None}  # fmt: skip


def _node(cuda=False, n=0, nvml=None) -> dict:
    return {"hostname": "n1", "error": None, "cuda_available": cuda, "cuda_device_count": n,
            "topo_ok": cuda, "topo_status": "ok" if cuda else "nvidia-smi not found",
            "topo_gpus": n, "ray_gpus": float(n),
            "nvml_gpus": n if nvml is None else nvml}  # fmt: skip


def _plan(facts: verdict.Facts, quick=False, peak=None) -> plan.SelftestPlan:
    """The plan the command makes for the nodes the facts describe."""
    nodes = [
        plan.NodeFacts(n["hostname"], cuda_available=n["cuda_available"],
                       ray_gpus=n["ray_gpus"], gpu_names=("NVIDIA H100 80GB HBM3",) * n["nvml_gpus"],
                       nvidia_smi=n["topo_ok"], cpus=2.0)
        for n in facts.nodes
    ]  # fmt: skip
    return plan.plan_selftest(nodes, quick, peak)


def decide(facts: verdict.Facts, quick=False) -> list[verdict.Verdict]:
    return verdict.decide(facts, _plan(facts, quick))


def _fleet_node(i=1, gpus=0, **over) -> dict:
    gpu = {"pcie_gen_current": 5, "pcie_width_current": 16, "pcie_gen_max": 5}
    health = {
        "idle": {"gpus": [gpu] * gpus, "note": None if gpus else "no GPU"},
        "under_load": {"gpus": [gpu | {"under_load": True}] * gpus} if gpus else None,
    }
    return {"fleet_id": "f1", "node_id": f"id{i}", "hostname": f"n{i}", "ip": f"10.0.0.{i}",
            "gpus": float(gpus), "compute_status": "ok", "compute_error": None,
            "compute_tokens_per_s": 9000.0 if gpus else 800.0,
            "compute_device": "cuda:0" if gpus else "cpu", "health": json.dumps(health),
            "health_note": None if gpus else "no GPU: NVML checks do not apply"} | over  # fmt: skip


def _pair(a, b=None, **over) -> dict:
    return {"fleet_id": "f1", "link": "default", "kind": "intra" if b is None else "inter",
            "node_a": a, "node_b": b or a, "backend": "gloo", "status": "ok", "error": None,
            "busbw_gbps": 1.5} | over  # fmt: skip


def fleet_facts(n_nodes=1, gpus=0, **over) -> FleetFacts:
    """A clean fleet check: ``n_nodes`` nodes of ``gpus`` GPUs, every pair of them measured."""
    nodes = tuple(_fleet_node(i, gpus) for i in range(1, n_nodes + 1))
    intra_over = {0: {}, 1: {"status": "skipped", "backend": None, "busbw_gbps": None}}
    intra = [_pair(n["node_id"], **intra_over.get(gpus, {"backend": "nccl"})) for n in nodes]
    inter = [
        _pair(a["node_id"], b["node_id"], backend="nccl" if gpus else "gloo")
        for i, a in enumerate(nodes)
        for b in nodes[i + 1 :]
    ]
    check = {"fleet_id": "f1", "status": "ok", "error": None, "n_nodes": n_nodes,
             "pairs_mode": "all", "wall_s": 21.0, "n_suspects": 0}  # fmt: skip
    facts = FleetFacts(True, checks=(check,), nodes=nodes, pairs=(*intra, *inter))
    return dataclasses.replace(facts, **over)


def cpu_facts(**over) -> verdict.Facts:
    two = [_run("two_rank", s, g) for s in plan.STRATEGIES for g in plan.GRAD_ACCUMS]
    hang = _run("hang", status="failed", error="run timed out after 20 s", n_steps=None)
    facts = verdict.Facts(
        doctor_exit=0,
        nodes=(_node(),),
        sweeps={
            "one_rank": verdict.SweepFacts(True, runs=(_run("one_rank", world_size=1),)),
            "one_rank_alt": verdict.SweepFacts(True, runs=(_run("one_rank_alt", world_size=1),)),
            "two_rank": verdict.SweepFacts(True, runs=tuple(two)),
            "nvme": verdict.SweepFacts(
                True, runs=(_run("nvme", "zero3", offload="nvme", nvme_swap_files=12),)
            ),
            "hang": verdict.SweepFacts(True, runs=(hang,)),
            "fsdp2": verdict.SweepFacts(True, runs=(_fsdp2_run(),)),
        },
        diagnostics=(_stack(hang["run_id"], 0), _stack(hang["run_id"], 1)),
        fleet=fleet_facts(),
    )
    return dataclasses.replace(facts, **over)


def gpu_facts(n_gpus=1, **over) -> verdict.Facts:
    f = cpu_facts()
    shared = {"link_class": "shared-gpu", "ranks_per_gpu": 2}
    sweeps = {
        k: verdict.SweepFacts(True, runs=tuple(_gpu(r) for r in s.runs))
        for k, s in f.sweeps.items()
    }
    launched = {"one_rank": "actors", "one_rank_alt": "fork", "two_rank": "actors"}
    for key, launcher in launched.items():
        sweeps[key] = verdict.SweepFacts(
            True, runs=tuple(r | {"launcher": launcher} for r in sweeps[key].runs)
        )
    sweeps["two_rank"] = verdict.SweepFacts(
        True, runs=tuple(r | shared for r in sweeps["two_rank"].runs)
    )
    sweeps["two_rank_fork"] = verdict.SweepFacts(
        True,
        runs=tuple(
            r | {"sweep": plan.sweep_name("two_rank_fork"), "launcher": "fork",
                 "run_id": r["run_id"].replace("two_rank", "two_rank_fork")}
            for r in sweeps["two_rank"].runs
        ),
    )  # fmt: skip
    hang_id = sweeps["hang"].runs[0]["run_id"]
    facts = dataclasses.replace(
        f,
        nodes=(_node(True, n_gpus),),
        captures={"n1": {"nvidia-smi topo -m": "ok", "nvidia-smi -q": "ok"}},
        sweeps=sweeps,
        diagnostics=(_stack(hang_id, 0, trace=True), _stack(hang_id, 1)),
        fleet=fleet_facts(gpus=n_gpus),
    )
    return dataclasses.replace(facts, **over)


NOT_RUN_ON_CPU = {
    "gpu": "no GPU on any node (NVML and CUDA see none)",
    "cuda": "no CUDA",
    "2 gpus": "no CUDA",
}


def by_check(verdicts) -> dict[str, plan.Verdict]:
    return {v.check: v for v in verdicts}


def test_the_table_names_each_check_once_and_every_sweep_it_reads():
    assert len(set(plan.CHECK_NAMES)) == len(plan.CHECKS)
    keys = set(plan.sweep_specs(cuda=True, n_gpus=2))
    assert {c.sweep for c in plan.CHECKS if c.sweep} == keys
    assert {c.name for c in plan.CHECKS if c.needs == "2 devices"} == {"fsdp2"}
    gpu_only = {c.name for c in plan.CHECKS if c.needs in ("gpu", "cuda", "2 gpus")}
    assert gpu_only == {
        "gpu_captures",
        "fleet_gpu",
        "one_rank_gpu_figures",
        "rehearsal_shared_gpu",
        "shared_gpu_fork",
        "two_gpu",
        "hang_flight_recorder",
    }


@pytest.mark.parametrize(("cuda", "n_gpus"), [(False, 0), (True, 1), (True, 2), (True, 8)])
def test_every_sweep_file_is_a_valid_sweep(cuda, n_gpus):
    for key, spec in plan.sweep_specs(cuda, n_gpus).items():
        parsed = parse_spec(spec, f"{key}.yaml")
        assert parsed.name == plan.sweep_name(key)


def test_cpu_sweeps_are_small_and_gpu_ones_share_a_gpu_only_when_one_is_all_there_is():
    cpu = plan.sweep_specs(False, 0)
    assert set(cpu) == {"one_rank", "one_rank_alt", "two_rank", "nvme", "hang", "fsdp2"}
    # each launcher once: the default one (fork on CPU) and the other one
    assert (cpu["one_rank"]["launcher"], cpu["one_rank_alt"]["launcher"]) == ("fork", "actors")
    assert cpu["two_rank"]["launcher"] == "fork" and "two_rank_fork" not in cpu
    assert all(s["model"] == "gpt2-tiny" and s["seq_len"] == 32 for s in cpu.values())
    assert all("ranks_per_gpu" not in s for s in cpu.values())
    one = plan.sweep_specs(True, 1)
    assert one["one_rank"]["model"] == "gpt2" and one["one_rank"]["precision"] == "bf16"
    assert one["two_rank"]["ranks_per_gpu"] == 2 and one["hang"]["ranks_per_gpu"] == 2
    assert "two_gpu" not in one and "fsdp2" not in one  # FSDP2 refuses ranks_per_gpu 2
    # on GPU: fresh actors by default, and the same runs forked
    assert (one["one_rank"]["launcher"], one["one_rank_alt"]["launcher"]) == ("actors", "fork")
    assert one["two_rank"]["launcher"] == "actors" and one["two_rank_fork"]["launcher"] == "fork"
    differ = ("name", "launcher", "run_timeout_s")  # a forked run is expected to start sooner
    assert {k: v for k, v in one["two_rank_fork"].items() if k not in differ} == {
        k: v for k, v in one["two_rank"].items() if k not in differ
    }
    two = plan.sweep_specs(True, 2)
    assert two["two_rank"]["ranks_per_gpu"] == 2  # the rehearsal runs on any GPU node
    assert "ranks_per_gpu" not in two["two_gpu"] and "ranks_per_gpu" not in two["hang"]
    assert "ranks_per_gpu" not in two["fsdp2"] and two["fsdp2"]["world_size"] == 2
    assert two["two_gpu"]["grid"]["strategy"] == list(plan.STRATEGIES)
    assert cpu["hang"]["links"] == {"hang": {"LINKSWEEP_INJECT_FAULT": "1:1:hang"}}


def test_cpu_all_good_passes_and_every_gpu_check_reads_not_run_no_cuda():
    verdicts = decide(cpu_facts())
    assert [v.check for v in verdicts] == list(plan.CHECK_NAMES)
    for v in verdicts:
        needs = next(c for c in plan.CHECKS if c.name == v.check).needs
        why = NOT_RUN_ON_CPU.get(needs)
        assert (v.result, v.line()) == (
            ("not run", f"not run: {why}") if why else ("pass", "pass")
        ), v
    assert verdict.exit_ok(verdicts)


def test_gpu_all_good_passes_and_two_gpu_waits_for_a_second_gpu():
    v = by_check(decide(gpu_facts(n_gpus=1)))
    assert v["two_gpu"].result == "not run" and "needs 2 on one node" in v["two_gpu"].detail
    assert v["fsdp2"].result == "not run" and "ranks_per_gpu: 2" in v["fsdp2"].detail
    assert {c for c, x in v.items() if x.result != "pass"} == {"two_gpu", "fsdp2"}
    assert "MFU 0.310" in v["one_rank_gpu_figures"].detail


def test_gpu_with_two_gpus_decides_two_gpu_from_its_runs():
    f = gpu_facts(n_gpus=2)
    two = tuple(_gpu(_run("two_gpu", s, g)) for s in plan.STRATEGIES for g in plan.GRAD_ACCUMS)
    ok = dataclasses.replace(f, sweeps=f.sweeps | {"two_gpu": verdict.SweepFacts(True, runs=two)})
    assert by_check(decide(ok))["two_gpu"].result == "pass"
    missing = dataclasses.replace(ok, sweeps=f.sweeps)
    assert by_check(decide(missing))["two_gpu"].result == "fail"
    on_gloo = tuple(r | {"backend": "gloo"} for r in two)
    bad = dataclasses.replace(
        f, sweeps=f.sweeps | {"two_gpu": verdict.SweepFacts(True, runs=on_gloo)}
    )
    assert "backend gloo" in by_check(decide(bad))["two_gpu"].detail


def _with_runs(facts: verdict.Facts, key: str, edit) -> verdict.Facts:
    runs = tuple(edit(dict(r)) for r in facts.sweeps[key].runs)
    return dataclasses.replace(
        facts, sweeps=facts.sweeps | {key: verdict.SweepFacts(True, runs=runs)}
    )


def test_a_failed_zero2_run_fails_its_check_only_naming_it():
    def fail_zero2_ga8(r):
        if (r["strategy"], r["grad_accum"]) == ("zero2", 8):
            r |= {"status": "failed", "error": "RuntimeError: boom\nmore", "tokens_per_s": None}
        return r

    verdicts = decide(_with_runs(cpu_facts(), "two_rank", fail_zero2_ga8))
    v = by_check(verdicts)
    assert v["two_rank_zero2"].result == "fail"
    assert "zero2 grad_accum 8: failed" in v["two_rank_zero2"].detail
    assert "RuntimeError: boom" in v["two_rank_zero2"].detail
    assert all(v[f"two_rank_{s}"].result == "pass" for s in ("ddp", "zero1", "zero3"))
    assert not verdict.exit_ok(verdicts)


def test_a_missing_grad_accum_and_a_run_without_steps_fail():
    only_ga1 = cpu_facts().sweeps["two_rank"].runs
    facts = dataclasses.replace(
        cpu_facts(),
        sweeps=cpu_facts().sweeps
        | {
            "two_rank": verdict.SweepFacts(
                True, runs=tuple(r for r in only_ga1 if r["grad_accum"] == 1)
            )
        },
    )
    assert "ddp grad_accum 8: no run stored" in by_check(decide(facts))["two_rank_ddp"].detail
    no_steps = _with_runs(cpu_facts(), "one_rank", lambda r: r | {"n_steps": 0})
    assert by_check(decide(no_steps))["one_rank"].result == "fail"


def test_hang_must_fail_with_every_ranks_stack():
    v = by_check(decide(_with_runs(cpu_facts(), "hang", lambda r: r | {"status": "ok"})))
    assert v["hang"].result == "fail" and "expected failed" in v["hang"].detail
    hang_id = cpu_facts().sweeps["hang"].runs[0]["run_id"]
    one_stack = cpu_facts(diagnostics=(_stack(hang_id, 0),))
    v = by_check(decide(one_stack))
    assert v["hang"].result == "fail" and "ranks [0] of 2" in v["hang"].detail


def test_gpu_hang_needs_the_flight_recorder_dump():
    f = gpu_facts()
    hang_id = f.sweeps["hang"].runs[0]["run_id"]
    no_dump = dataclasses.replace(f, diagnostics=(_stack(hang_id, 0), _stack(hang_id, 1)))
    v = by_check(decide(no_dump))
    assert v["hang"].result == "pass"
    assert v["hang_flight_recorder"].result == "fail"
    assert "flight-recorder" in v["hang_flight_recorder"].detail


def test_nvme_is_not_run_where_a_node_lacks_libaio_and_fails_on_any_other_refusal():
    """The first GPU node (an H200 image without libaio-dev) refused the NVMe sweep in its
    preflight: a node's missing library, like a missing second GPU, is ``not run``, on a GPU
    node as on CPU; any other refusal of the sweep is linksweep's and fails."""
    why = "grid.offload: 'nvme' needs DeepSpeed's async_io op, which cannot be built here"
    lacks = {"nvme": verdict.SweepFacts(False, why, node_lacks=True)}
    refused = {"nvme": verdict.SweepFacts(False, "nvme_path: '/x' is not a writable folder")}
    for facts in (cpu_facts, gpu_facts):
        v = by_check(decide(facts(sweeps=facts().sweeps | lacks)))
        assert (v["nvme_offload"].result, v["nvme_offload"].detail) == ("not run", why)
        assert verdict.exit_ok(list(v.values()))
        v = by_check(decide(facts(sweeps=facts().sweeps | refused)))
        assert v["nvme_offload"].result == "fail"
    no_swap = _with_runs(cpu_facts(), "nvme", lambda r: r | {"nvme_swap_files": 0})
    assert "no swap files" in by_check(decide(no_swap))["nvme_offload"].detail


def test_gpu_figures_and_rehearsal_fail_on_what_a_broken_gpu_path_stores():
    f = _with_runs(gpu_facts(), "one_rank", lambda r: r | {"peak_mem_bytes": None})
    assert "no peak memory" in by_check(decide(f))["one_rank_gpu_figures"].detail
    f = _with_runs(gpu_facts(), "one_rank", lambda r: r | {"backend": "gloo", "mfu": None})
    d = by_check(decide(f))["one_rank_gpu_figures"].detail
    assert "backend gloo" in d and "no MFU" in d
    f = _with_runs(gpu_facts(), "two_rank", lambda r: r | {"link_class": "NV12"})
    v = by_check(decide(f))["rehearsal_shared_gpu"]
    assert v.result == "fail" and "link_class NV12" in v.detail


def test_a_gpu_without_a_known_peak_or_nvml_clocks_passes_saying_mfu_unknown():
    """An A10G has no datasheet peak in the table, and a MIG slice gives NVML no clocks: what
    the hardware cannot give is reported, never failed."""
    a10g = {"mfu": None, "peak_tflops": None, "gpu_name": "NVIDIA A10G",
            "peak_source": "NVIDIA A10G: no peak for this GPU (no datasheet); set peak_tflops",
            "telemetry": "absent: NVML cannot read GPU 'MIG-1' (MIG)"}  # fmt: skip
    v = by_check(decide(_with_runs(gpu_facts(), "one_rank", lambda r: r | a10g)))
    assert v["one_rank_gpu_figures"].result == "pass", v["one_rank_gpu_figures"]
    assert "MFU unknown: NVIDIA A10G: no peak for this GPU" in v["one_rank_gpu_figures"].detail
    assert "telemetry absent: NVML cannot read GPU" in v["one_rank_gpu_figures"].detail
    known = by_check(decide(gpu_facts()))["one_rank_gpu_figures"]
    assert known.detail.startswith("MFU 0.310 (peak 989 TFLOP/s), peak memory 9.00 GB")


def test_every_check_has_one_decide_function():
    assert list(verdict.DECIDERS) == list(plan.CHECK_NAMES)


def test_doctor_topo_and_captures_fail_with_their_reason():
    v = by_check(decide(cpu_facts(doctor_exit=1, doctor_problems="[INVALIDATES] pcie")))
    assert (v["doctor"].result, v["doctor"].detail) == ("fail", "[INVALIDATES] pcie")
    broken = (_node() | {"error": "probe timed out"},)
    assert "probe timed out" in by_check(decide(cpu_facts(nodes=broken)))["topo"].detail
    short = (_node(True, 2) | {"topo_gpus": 1},)
    d = by_check(decide(gpu_facts(nodes=short, n_gpus=2)))["topo"].detail
    assert d == "n1: topo -m shows 1 GPU(s), CUDA sees 2"
    f = gpu_facts(nodes=(_node(True, 2, nvml=1),), n_gpus=2)
    f = dataclasses.replace(
        f, captures={"n1": {"nvidia-smi topo -m": "ok", "nvidia-smi -q": "exit 9"}}
    )
    d = by_check(decide(f))["gpu_captures"].detail
    assert "n1: nvidia-smi -q: exit 9" in d and "NVML lists 1 GPU(s), CUDA sees 2" in d


def test_captures_are_judged_on_the_gpu_nodes_not_on_a_gpu_less_head():
    """The head runs selftest and has no nvidia-smi; the GPU worker's captures decide."""
    head = _node() | {"hostname": "head"}
    f = gpu_facts(nodes=(head, _node(True, 1)))
    no_smi = {"nvidia-smi topo -m": "nvidia-smi not found on PATH", "nvidia-smi -q": "same"}
    ok = {"nvidia-smi topo -m": "ok", "nvidia-smi -q": "ok"}
    v = by_check(decide(dataclasses.replace(f, captures={"head": no_smi, "n1": ok})))
    assert v["gpu_captures"].result == "pass", v["gpu_captures"]
    assert "captured on n1;" in v["gpu_captures"].detail
    v = by_check(decide(dataclasses.replace(f, captures={"head": ok})))
    assert v["gpu_captures"].detail.startswith("n1: nvidia-smi topo -m: not captured")


def test_a_sweep_that_never_ran_fails_and_nothing_run_is_not_ok():
    facts = cpu_facts(sweeps={k: s for k, s in cpu_facts().sweeps.items() if k != "hang"})
    v = by_check(decide(facts))
    assert v["hang"].result == "fail" and "selftest-hang was not run" in v["hang"].detail
    assert not verdict.exit_ok([verdict.Verdict("x", "not run", "no CUDA")])


def _quick_facts(facts: verdict.Facts) -> verdict.Facts:
    """What a --quick selftest stores: the runs its one-run sweeps ask for, no fleet check."""
    keep = {("one_rank", "ddp", 1), ("one_rank_alt", "ddp", 1), ("two_rank", "zero3", 1),
            ("two_rank_fork", "zero3", 1), ("nvme", "zero3", 1), ("hang", "ddp", 1),
            ("fsdp2", "fsdp", 2)}  # fmt: skip
    sweeps = {
        k: verdict.SweepFacts(True, runs=tuple(
            r for r in s.runs if (k, r["strategy"], r["grad_accum"]) in keep))
        for k, s in facts.sweeps.items()
    }  # fmt: skip
    return dataclasses.replace(facts, sweeps=sweeps, fleet=None)


def test_quick_runs_one_of_each_kind_and_leaves_the_rest_not_run():
    v = by_check(decide(_quick_facts(cpu_facts()), quick=True))
    ran = ["doctor", "topo", "one_rank", "one_rank_launchers", "two_rank_zero3", "fsdp2",
           "nvme_offload", "hang"]  # fmt: skip
    assert [c for c, x in v.items() if x.result == "pass"] == ran, v
    assert v["fleet"].line() == "not run: --quick"
    assert {v[f"two_rank_{s}"].detail for s in ("ddp", "zero1", "zero2")} == {"--quick"}
    assert v["gpu_captures"].detail.startswith("no GPU")  # what the cluster lacks is said first
    assert verdict.exit_ok(list(v.values()))
    gpu = by_check(decide(_quick_facts(gpu_facts()), quick=True))
    assert gpu["rehearsal_shared_gpu"].result == "pass"  # judged on the one zero3 run
    assert gpu["hang_flight_recorder"].result == "pass"


def test_quick_sweeps_ask_one_run_each():
    the_plan = plan.plan_selftest([plan.NodeFacts("g", cuda_available=True, ray_gpus=2.0)], True)
    assert {k: plan.planned_runs(s) for k, s in the_plan.sweeps.items()} == {
        "one_rank": [("ddp", 1)],
        "one_rank_alt": [("ddp", 1)],
        "two_rank": [("zero3", 1)],
        "two_rank_fork": [("zero3", 1)],
        "two_gpu": [("zero3", 1)],
        "fsdp2": [("fsdp", 2)],
        "nvme": [("zero3", 1)],
        "hang": [("ddp", 1)],
    }
    assert not the_plan.fleet


def _fleet(facts: verdict.Facts) -> tuple[verdict.Verdict, verdict.Verdict]:
    v = by_check(decide(facts))
    return v["fleet"], v["fleet_gpu"]


def test_fleet_passes_on_a_clean_check_and_names_suspects_without_failing():
    fleet, fleet_gpu = _fleet(cpu_facts())
    assert fleet.result == "pass" and fleet_gpu.line() == "not run: no CUDA"
    assert "1 node(s), compute 800-800 tokens/s" in fleet.detail
    assert fleet.detail.endswith("suspects: none")
    three = fleet_facts(3, suspects=({"kind": "node", "hostname": "n2", "ip": "10.0.0.2",
                                      "partner_ip": None, "link": None,
                                      "why": "compute 40% under the median"},))  # fmt: skip
    fleet, _ = _fleet(cpu_facts(fleet=three))
    assert fleet.result == "pass" and "3 inter-node pair(s)" in fleet.detail
    assert "suspects (1, see fleet.txt): node n2 (compute 40% under the median)" in fleet.detail


def test_fleet_fails_on_a_failed_pair_probe_or_check_naming_it():
    f = fleet_facts(2)
    failed_pair = tuple(
        p | {"status": "failed", "error": "gloo timeout\ntrace"} if p["kind"] == "inter" else p
        for p in f.pairs
    )
    fleet, _ = _fleet(cpu_facts(fleet=dataclasses.replace(f, pairs=failed_pair)))
    assert fleet.result == "fail" and "pair n1-n2 (default): failed: gloo timeout" in fleet.detail
    no_inter = tuple(p for p in f.pairs if p["kind"] == "intra")
    fleet, _ = _fleet(cpu_facts(fleet=dataclasses.replace(f, pairs=no_inter)))
    assert "0 inter-node pair(s), expected 1" in fleet.detail
    probe = (
        _fleet_node(1, compute_status="failed", compute_error="OOM", compute_tokens_per_s=None),
    )
    fleet, _ = _fleet(cpu_facts(fleet=fleet_facts(nodes=probe)))
    assert (fleet.result, fleet.detail) == ("fail", "n1: compute probe failed: OOM; suspects: none")
    (check,) = f.checks
    crashed = check | {"status": "failed", "error": "RuntimeError: actor died"}
    fleet, _ = _fleet(cpu_facts(fleet=dataclasses.replace(f, ran=False, checks=(crashed,))))
    assert fleet.result == "fail" and "status failed: RuntimeError: actor died" in fleet.detail
    never = FleetFacts(False, "no alive Ray node can run a probe")
    fleet, fleet_gpu = _fleet(gpu_facts(fleet=never))
    assert "0 fleet checks stored, expected 1 (no alive Ray node" in fleet.detail
    assert fleet_gpu.result == "fail"
    unhealthy = (_fleet_node(1, health=None, health_note=None),)
    fleet, _ = _fleet(cpu_facts(fleet=fleet_facts(nodes=unhealthy)))
    assert "n1: no health read" in fleet.detail
    skipped_cpu = tuple(p | {"status": "skipped"} for p in fleet_facts().pairs)
    fleet, _ = _fleet(cpu_facts(fleet=fleet_facts(pairs=skipped_cpu)))
    assert "n1: intra-node skipped with 0.0 GPU(s)" in fleet.detail


@pytest.mark.parametrize("n_gpus", [1, 2, 8])
def test_fleet_gpu_passes_on_cuda_probe_pcie_readings_and_nccl_intra(n_gpus):
    fleet, fleet_gpu = _fleet(gpu_facts(n_gpus=n_gpus))
    assert (fleet.result, fleet_gpu.result) == ("pass", "pass"), (fleet, fleet_gpu)
    backend = "nccl" if n_gpus >= 2 else "-"  # one GPU: intra-node skipped, nothing to measure
    assert fleet_gpu.detail.endswith(f"probe on cuda:0, PCIe read idle and under load, "
                                     f"intra-node over {backend}")  # fmt: skip


def test_fleet_gpu_fails_on_a_cpu_probe_missing_pcie_or_gloo_intra():
    f = fleet_facts(gpus=2)
    on_cpu = (_fleet_node(1, 2, compute_device="cpu"),)
    _, v = _fleet(gpu_facts(n_gpus=2, fleet=dataclasses.replace(f, nodes=on_cpu)))
    assert (v.result, v.detail) == ("fail", "n1: compute probe on cpu, expected cuda")
    health = json.loads(f.nodes[0]["health"])
    health["idle"]["gpus"][1] = health["idle"]["gpus"][1] | {"pcie_width_current": None}
    health["under_load"] = None
    no_pcie = (f.nodes[0] | {"health": json.dumps(health)},)
    _, v = _fleet(gpu_facts(n_gpus=2, fleet=dataclasses.replace(f, nodes=no_pcie)))
    assert "n1: idle health of 2 GPU(s): no per-GPU PCIe gen/width" in v.detail
    assert "n1: no under-load PCIe reading (0 GPU(s))" in v.detail
    gloo = tuple(p | {"backend": "gloo"} for p in f.pairs)
    fleet, v = _fleet(gpu_facts(n_gpus=2, fleet=dataclasses.replace(f, pairs=gloo)))
    assert fleet.result == "pass"  # the fleet itself measured; the GPU path is what failed
    assert v.detail == "n1: intra-node (default) backend gloo, expected nccl"
    cpu_only = fleet_facts(gpus=0)
    _, v = _fleet(gpu_facts(n_gpus=2, fleet=cpu_only))
    assert v.detail == "no fleet node has a GPU (Ray num_gpus 0 everywhere)"


def test_fleet_gpu_reads_the_health_json_as_fleet_rows_stores_it():
    """The stored layout, not a copy of it: rows built by tables.node_rows from the records
    a GPU node's probes return."""
    node = SimpleNamespace(node_id="id1", ip="10.0.0.1", hostname="n1", cpus=16.0, gpus=2.0)

    def stored(pcie_gen):
        gpu = {"index": 0, "pcie_gen_current": pcie_gen, "pcie_width_current": 16}
        idle = HealthRecord(gpus=(gpu, gpu | {"index": 1}))
        probe = ComputeRecord("cuda:0", "gpt2", "bf16", 1024, 8, 5, (0.1,), 81920.0,
                              health_under_load=HealthRecord(gpus=(gpu | {"under_load": True},)))  # fmt: skip
        (row,) = tables.node_rows("f1", [node], {"id1": probe}, {"id1": idle}, None)
        return dataclasses.replace(fleet_facts(gpus=2), nodes=(row,))

    _, v = _fleet(gpu_facts(n_gpus=2, fleet=stored(5)))
    assert v.result == "pass", v
    _, v = _fleet(gpu_facts(n_gpus=2, fleet=stored(None)))
    assert "n1: idle health of 2 GPU(s)" in v.detail and "under-load" in v.detail


def test_gpu_sweeps_train_in_fp32_where_a_gpu_only_emulates_bf16():
    """V100 and T4 compute bf16 by emulation: a bf16 selftest would time the emulation and take
    a peak the GPU has no units for; the GPU sweeps train in fp32 there (before: always bf16)."""
    from orchestrator.selftest.plan import NodeFacts, plan_selftest

    def node(native):
        names = ("Tesla V100-SXM2-16GB",) if native is False else ("NVIDIA A100-SXM4-80GB",)
        return NodeFacts("g", "10.0.0.2", True, 8.0, names * 8, True, 64.0, None, native)

    for native, precision in ((False, "fp32"), (True, "bf16"), (None, "bf16")):
        sweeps = plan_selftest([node(native)]).sweeps
        assert {s["precision"] for s in sweeps.values()} == {precision}, native
    cpu = plan_selftest([NodeFacts("c", cpus=4.0)]).sweeps
    assert {s["precision"] for s in cpu.values()} == {"fp32"}


def test_the_nvme_run_has_time_to_build_async_io():
    """The NVMe run JIT-builds DeepSpeed's async_io where no build is cached (minutes): its
    timeout holds that build on CPU and GPU; cut at 180 s it failed the check for the build."""
    from orchestrator.selftest.plan import AIO_BUILD_S, run_timeout_for, sweep_specs

    for cuda, n_gpus in ((False, 0), (True, 1), (True, 8)):
        sweeps = sweep_specs(cuda, n_gpus)
        nvme = sweeps["nvme"]
        assert nvme["run_timeout_s"] >= AIO_BUILD_S + run_timeout_for(sweeps["one_rank"]) - 1


# -- the FSDP2 check -------------------------------------------------------------------------


def test_fsdp2_runs_on_cpu_and_on_two_gpus_and_says_why_not_on_one():
    """CPU: two gloo ranks on any node; a GPU node: two GPUs of one node; one GPU at most: not
    run, saying FSDP2 refuses two ranks sharing one GPU."""
    cpu = plan.plan_selftest([plan.NodeFacts("c", cpus=4.0)]).check("fsdp2")
    assert (cpu.run, cpu.nodes, cpu.gpus, cpu.sweep) == (True, ("c",), 0, "fsdp2")
    one = plan.plan_selftest([plan.NodeFacts("g", cuda_available=True, ray_gpus=1.0)])
    assert not one.check("fsdp2").run and "fsdp2" not in one.sweeps
    assert one.check("fsdp2").why_not == (
        "FSDP2 needs 2 GPUs on one node: two ranks sharing one GPU (ranks_per_gpu: 2) is "
        "refused for fsdp/hsdp; 1 GPU offered by Ray on the node with most"
    )
    nodes = [plan.NodeFacts("g1", cuda_available=True, ray_gpus=1.0),
             plan.NodeFacts("g8", cuda_available=True, ray_gpus=8.0)]  # fmt: skip
    eight = plan.plan_selftest(nodes).check("fsdp2")
    assert (eight.run, eight.nodes, eight.gpus) == (True, ("g8",), 2)


def test_the_plans_reason_is_the_specs_refusal():
    """The plan does not run FSDP2 on one GPU because the sweep file would be refused: if the
    spec ever accepts fsdp with ranks_per_gpu 2, this fails and the plan should use it."""
    from orchestrator.sweep.spec import SpecError

    shared = plan.sweep_specs(True, 2)["fsdp2"] | {"ranks_per_gpu": 2}
    with pytest.raises(SpecError, match="ranks_per_gpu: 2 is refused for the FSDP2 strategies"):
        parse_spec(shared, "fsdp2.yaml")


@pytest.mark.parametrize(("cuda", "n_gpus"), [(False, 0), (True, 2)])
def test_fsdp2_sweep_is_one_run_at_grad_accum_2_through_fsdp2s_sync_switch(cuda, n_gpus):
    spec = plan.sweep_specs(cuda, n_gpus)["fsdp2"]
    assert plan.planned_runs(spec) == [("fsdp", 2)]
    assert spec["grid"]["grad_sync"] == "last" and spec["world_size"] == 2
    (v,) = expand_grid(parse_spec(spec))
    assert (v.strategy, v.grad_accum, v.grad_sync, v.placement) == ("fsdp", 2, "last", "pack")
    quick = plan.sweep_specs(cuda, n_gpus, quick=True)["fsdp2"]
    assert plan.planned_runs(quick) == [("fsdp", 2)]  # already one run: --quick keeps it


def test_fsdp2_sweep_on_cpu_is_small():
    """gpt2-tiny, 2 timed steps at grad_accum 2: a few seconds in the CPU selftest."""
    spec = plan.sweep_specs(False, 0)["fsdp2"]
    assert (spec["model"], spec["steps"], spec["warmup_steps"]) == ("gpt2-tiny", 2, 1)
    assert plan.estimate_sweep_s(spec) == plan.SWEEP_START_S + plan.CPU_RUN_START_S + (
        3 * 2 * plan.CPU_MICRO_STEP_S
    )


def test_fsdp2_passes_with_bytes_equal_theory_and_the_check_ok():
    v = by_check(decide(cpu_facts()))["fsdp2"]
    assert v.result == "pass"
    assert v.detail == (
        "fsdp sync last ga 2: 2621440 B per step = theory, accum_check ok, 900 tokens/s (gloo)"
    )


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"comm_bytes_per_step": FSDP2_BYTES + 4}, "2621444 B per step sent, theory 2621440 B"),
        (
            {"comm_bytes_per_step": None, "comm_note": "no comms recorded"},
            "bytes per step measured -, expected 2621440 (no comms recorded)",
        ),
        (
            {"accum_check": "fail: reduce_scatter sent 1310720 B, promised 0 B"},
            "accumulation check fail: reduce_scatter sent",
        ),
        ({"accum_check": None}, "accumulation check not stored"),
        ({"grad_accum": 1}, "no non-final micro-batch to check"),
        ({"status": "failed", "error": "RuntimeError: mesh\nx", "tokens_per_s": None}, "failed"),
    ],
)
def test_fsdp2_fails_naming_what_is_off(over, words):
    facts = cpu_facts()
    sweeps = facts.sweeps | {"fsdp2": verdict.SweepFacts(True, runs=(_fsdp2_run(**over),))}
    v = by_check(decide(dataclasses.replace(facts, sweeps=sweeps)))["fsdp2"]
    assert v.result == "fail" and words in v.detail, v


def test_fsdp2_on_gpus_needs_nccl_and_a_sweep_that_ran():
    f = gpu_facts(n_gpus=2)
    two = tuple(_gpu(_run("two_gpu", s, g)) for s in plan.STRATEGIES for g in plan.GRAD_ACCUMS)
    f = dataclasses.replace(f, sweeps=f.sweeps | {"two_gpu": verdict.SweepFacts(True, runs=two)})
    assert by_check(decide(f))["fsdp2"].result == "pass"
    gloo = _with_runs(f, "fsdp2", lambda r: r | {"backend": "gloo"})
    v = by_check(decide(gloo))["fsdp2"]
    assert v.result == "fail" and "backend gloo, expected nccl" in v.detail
    refused = dataclasses.replace(
        f, sweeps=f.sweeps | {"fsdp2": verdict.SweepFacts(False, "grid.strategy: refused")}
    )
    assert by_check(decide(refused))["fsdp2"].result == "fail"


def _phases(run_id: str, launcher: str, **seconds: float) -> list[dict]:
    return [{"sweep": "-", "run_id": run_id, "launcher": launcher, "status": "ok", "phase": p,
             "s": s} for p, s in seconds.items()]  # fmt: skip


def test_each_launchers_start_up_per_run_is_its_phases_before_the_first_step():
    """One rank on both launchers, and two ranks sharing a GPU on both: the start-up table
    and the two checks' details give each launcher's median start-up, the phases summed
    (compile and the steps are not start-up)."""
    f = gpu_facts(n_gpus=1)
    runs = {k: [r["run_id"] for r in f.sweeps[k].runs] for k in startup.START_UP_SWEEPS}
    start_up = [
        *_phases(runs["one_rank"][0], "actors", imports=14.0, cuda_init=1.5, pg_init=0.5,
                 warmup=3.0, timed_steps=2.0),
        *_phases(runs["one_rank_alt"][0], "fork", placement=0.1, cuda_init=1.2, pg_init=0.3,
                 strategy_init=0.4),
        *(row for i, run_id in enumerate(runs["two_rank"])
          for row in _phases(run_id, "actors", imports=15.0 + i)),
        *(row for i, run_id in enumerate(runs["two_rank_fork"])
          for row in _phases(run_id, "fork", cuda_init=1.0, pg_init=1.0 + i, compile=30.0)),
    ]  # fmt: skip
    f = dataclasses.replace(f, start_up=tuple(start_up))
    table = {(r[0], r[1]): r for r in startup.start_up_table(f, _plan(f))}
    col = {c: i for i, c in enumerate(startup.START_UP_COLUMNS)}
    assert table["one rank", "actors"][col["median_s"]] == 16.0  # 14 + 1.5 + 0.5
    assert table["one rank", "fork"][col["median_s"]] == pytest.approx(2.0)
    assert table["one rank", "fork"][col["imports"]] is None  # a phase the run did not have
    shared = table["two ranks, one GPU", "fork"]
    n = len(runs["two_rank_fork"])
    assert shared[col["runs"]] == n and shared[col["max_s"]] == 2.0 + n - 1  # compile left out
    assert table["two ranks, one GPU", "actors"][col["median_s"]] == 15.0 + (n - 1) / 2
    v = by_check(verdict.decide(f, _plan(f)))
    assert v["one_rank_launchers"].result == "pass"
    assert v["one_rank_launchers"].detail == ("actors start-up 16.0 s/run, fork start-up 2.0 s/run")
    assert v["shared_gpu_fork"].result == "pass"
    assert f"fork start-up {2.0 + (n - 1) / 2:.1f} s/run" in v["shared_gpu_fork"].detail


def test_forked_ranks_that_did_not_share_the_gpu_over_nccl_fail_the_fork_check():
    f = gpu_facts(n_gpus=1)
    bad = tuple(r | {"backend": "gloo"} for r in f.sweeps["two_rank_fork"].runs)
    sweeps = {**f.sweeps, "two_rank_fork": verdict.SweepFacts(True, runs=bad)}
    v = by_check(decide(dataclasses.replace(f, sweeps=sweeps)))
    assert v["shared_gpu_fork"].result == "fail" and "backend gloo" in v["shared_gpu_fork"].detail
    assert v["rehearsal_shared_gpu"].result == "pass"  # the actors' runs are fine


LAUNCHER_CHECKS = ("one_rank", "one_rank_launchers", "rehearsal_shared_gpu", "shared_gpu_fork")


def test_only_the_launcher_checks_run_only_their_sweeps_on_one_gpu():
    one_gpu = [plan.NodeFacts("g", cuda_available=True, ray_gpus=1.0, gpu_names=("NVIDIA H100",))]
    full = plan.plan_selftest(one_gpu, quick=True)
    only = plan.plan_selftest(one_gpu, quick=True, only=LAUNCHER_CHECKS)
    assert set(only.sweeps) == {"one_rank", "one_rank_alt", "two_rank", "two_rank_fork"}
    assert {only.sweeps[k]["launcher"] for k in ("two_rank", "two_rank_fork")} == {"actors", "fork"}
    assert not only.fleet and only.estimate_s < full.estimate_s
    ran = {c.check for c in only.checks if c.run}
    # what the named checks need, what runs anyway (doctor, probes), and what their sweeps decide
    assert ran == {*LAUNCHER_CHECKS, "doctor", "topo", "gpu_captures", "one_rank_gpu_figures",
                   "two_rank_zero3"}  # fmt: skip
    assert only.check("hang").why_not == "not in --only"
    assert only.check("two_gpu").why_not == full.check("two_gpu").why_not  # its own reason first


def test_only_names_an_unknown_check_and_the_allowed_ones():
    with pytest.raises(ValueError) as exc:
        plan.plan_selftest([plan.NodeFacts("c", cpus=4.0)], only=("one_rank", "startup"))
    assert "--only 'startup': no such check; allowed: doctor, topo" in str(exc.value)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["selftest", "--only", "startup"])
    assert build_parser().parse_args(["selftest", "--only", "hang,one_rank"]).only == (
        "hang",
        "one_rank",
    )
