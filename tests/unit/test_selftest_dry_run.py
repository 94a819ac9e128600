"""``linksweep selftest``'s plan as the command uses it, without Ray: the command's own
``_selftest`` and ``dry_run`` against faked I/O (the node probes, the nvidia-smi captures, the
sweeps and the fleet check are recorded, never run). What it plans is sized from the GPUs Ray
offers; a selftest runs exactly the sweeps its dry run lists; the captures come from the GPU
nodes, not from the machine running selftest; the dry run runs nothing."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.commands import selftest as cmd
from orchestrator.selftest import plan
from orchestrator.selftest.plan_text import plan_text
from orchestrator.sweep.spec import parse_spec
from orchestrator.topology import discovery
from workloads.contract import NodeReport

H100 = "NVIDIA H100 80GB HBM3"
TOPO_2 = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-47\nGPU1\tNV18\t X \t0-47\n"


def _report(host: str, ray_gpus: float = 0.0, cuda: int = 0, name: str = H100) -> NodeReport:
    """A discovery report: ``cuda`` GPUs on the node (the probe sees them all: it drops
    CUDA_VISIBLE_DEVICES), of which Ray offers ``ray_gpus``."""
    inventory = [{"index": i, "name": name} for i in range(cuda)]
    return NodeReport(
        node_id=f"id-{host}", hostname=host, ip=f"10.0.0.{len(host)}", cpus=16.0, gpus=ray_gpus,
        topo_text=TOPO_2 if cuda == 2 else None,
        topo_status="ok" if cuda == 2 else "nvidia-smi not found on PATH",
        nvml_ok=bool(cuda), inventory=inventory, cuda_available=bool(cuda),
        cuda_device_count=cuda,
    )  # fmt: skip


OK_CAPTURES = {
    "nvidia-smi topo -m": {"text": TOPO_2, "status": "ok"},
    "nvidia-smi -q": {"text": "==NVSMI LOG==\n", "status": "ok"},
}
NO_SMI = {
    "nvidia-smi topo -m": {"text": None, "status": "nvidia-smi not found on PATH"},
    "nvidia-smi -q": {"text": None, "status": "nvidia-smi not found on PATH"},
}


@pytest.fixture
def fake_cluster(monkeypatch):
    """Install ``reports`` as what discovery finds and record every sweep the command runs;
    returns the record."""
    ran: dict[str, dict] = {}
    state = {"reports": [], "captures": []}

    def record_sweep(out, db, label, key, spec):
        ran[key] = spec
        return cmd.verdict.SweepFacts(True)

    monkeypatch.setattr(discovery, "discover_nodes", lambda *a, **k: state["reports"])
    monkeypatch.setattr(discovery, "capture_on_every_node", lambda *a, **k: state["captures"])
    monkeypatch.setattr(cmd, "_doctor", lambda out, address: (0, "doctor: nothing invalidates"))
    monkeypatch.setattr(cmd, "_run_fleet", lambda *a: ran.setdefault("fleet", {}) or None)
    monkeypatch.setattr(cmd, "_run_sweep", record_sweep)
    monkeypatch.setattr(cmd, "_read_back", lambda out, db: ([], []))
    return state, ran


def test_cuda_visible_devices_0_on_an_8_gpu_box_plans_one_gpu_checks_only(fake_cluster, tmp_path):
    """Ray started under CUDA_VISIBLE_DEVICES=0 offers 1 GPU; the probe still sees 8."""
    state, ran = fake_cluster
    state["reports"] = [_report("h100", ray_gpus=1.0, cuda=8)]
    cmd._selftest(tmp_path, "test", None, False)
    sweeps = {k: v for k, v in ran.items() if k != "fleet"}
    assert set(sweeps) == {"one_rank", "one_rank_alt", "two_rank", "two_rank_fork", "nvme", "hang"}
    assert sweeps["hang"]["ranks_per_gpu"] == 2 and sweeps["two_rank"]["ranks_per_gpu"] == 2
    assert sweeps["two_rank_fork"]["ranks_per_gpu"] == 2  # the same shared GPU, forked ranks
    rows = (tmp_path / "checks.csv").read_text()
    assert "two_gpu,not run,1 GPU offered by Ray on the node with most" in rows
    assert "h100 has 8; Ray offers 1" in rows


def test_a_cpu_selftest_runs_exactly_the_sweeps_its_dry_run_lists(fake_cluster, tmp_path):
    state, ran = fake_cluster
    state["reports"] = [_report("cpu1")]
    text = cmd.dry_run(False, None)
    assert ran == {}  # the dry run ran nothing: no sweep, no fleet check
    cmd._selftest(tmp_path, "test", None, False)
    _, the_plan = cmd.plan_here(False, None)
    assert {k: v for k, v in ran.items() if k != "fleet"} == the_plan.sweeps
    assert "fleet" in ran and the_plan.fleet
    for key in the_plan.sweeps:
        assert f"  {key}: " in text
    assert (tmp_path / "plan.txt").read_text() == text + "\n"


def test_quick_runs_what_its_dry_run_lists(fake_cluster, tmp_path):
    state, ran = fake_cluster
    state["reports"] = [_report("cpu1")]
    cmd._selftest(tmp_path, "test", None, True)
    assert "fleet" not in ran
    assert {k: plan.planned_runs(v) for k, v in ran.items()} == {
        "one_rank": [("ddp", 1)],
        "one_rank_alt": [("ddp", 1)],
        "two_rank": [("zero3", 1)],
        "fsdp2": [("fsdp", 2)],
        "nvme": [("zero3", 1)],
        "hang": [("ddp", 1)],
    }


def test_gpu_captures_come_from_the_gpu_node_not_the_gpu_less_head(fake_cluster, tmp_path):
    """The AWS and KubeRay cluster definitions put the driver on a head without a GPU (this
    machine, without nvidia-smi, plays it): the worker's captures decide the check."""
    state, _ = fake_cluster
    state["reports"] = [_report("head"), _report("worker", ray_gpus=2.0, cuda=2)]
    state["captures"] = [("head", NO_SMI), ("worker", OK_CAPTURES)]
    cmd._selftest(tmp_path, "test", None, False)
    rows = (tmp_path / "checks.csv").read_text()
    assert "gpu_captures,pass," in rows, rows
    assert (tmp_path / "nvidia-smi-topo-m-worker.txt").read_text() == TOPO_2
    assert (tmp_path / "nvidia-smi-q-worker.txt").is_file()
    assert not list(tmp_path.glob("nvidia-smi-*-head.txt"))


def test_the_dry_run_prints_every_check_nodes_gpus_and_time():
    nodes = [
        plan.NodeFacts("head", "10.0.0.1", cpus=8.0),
        plan.NodeFacts("gpu1", "10.0.0.2", True, 8.0, (H100,) * 8, True, 96.0),
    ]
    the_plan = plan.plan_selftest(nodes)
    text = plan_text(the_plan)
    assert "gpu1 10.0.0.2: 96 CPUs; 8x NVIDIA H100 80GB HBM3; Ray offers 8 GPU(s)" in text
    assert "  two_gpu               run on gpu1, 2 GPU(s) a run, sweep two_gpu" in text
    assert "  fsdp2                 run on gpu1, 2 GPU(s) a run, sweep fsdp2" in text
    fsdp2 = plan.estimate_sweep_s(the_plan.sweeps["fsdp2"])
    (line,) = [x for x in text.splitlines() if x.startswith("  fsdp2: ")]
    assert line.startswith("  fsdp2: 1 run(s) (fsdp ga 2), world_size 2, gpt2 bf16, 10 timed")
    assert line.endswith(f"about {fsdp2:.0f} s")  # the FSDP2 sweep's own time estimate
    assert "  gpu_captures          run on gpu1\n" in text
    for c in plan.CHECK_NAMES:
        assert f"  {c} " in text
    assert f"time: about {the_plan.estimate_s / 60:.0f} min expected" in text


def test_the_estimate_is_steps_times_step_time_and_every_run_is_bounded():
    one = plan.sweep_specs(True, 8)["one_rank"]
    steps = one["steps"] + one["warmup_steps"]
    assert plan.estimate_run_s(one, 1) == plan.GPU_RUN_START_S + steps * plan.GPU_MICRO_STEP_S
    shared = plan.sweep_specs(True, 1)["two_rank"]  # two ranks on one GPU: twice the time
    assert plan.estimate_run_s(shared, 8) == (
        plan.GPU_RUN_START_S + steps * 8 * 2 * plan.GPU_MICRO_STEP_S
    )
    h100 = plan.NodeFacts("gpu1", cuda_available=True, ray_gpus=8.0, gpu_names=(H100,) * 8)
    the_plan = plan.plan_selftest([h100])
    assert all(s["run_timeout_s"] < 1800 for s in the_plan.sweeps.values())  # not the default
    assert the_plan.estimate_s < the_plan.bound_s
    assert the_plan.estimate_s == plan.PROBES_S + plan.FLEET_S_PER_NODE + sum(
        plan.estimate_sweep_s(s) for s in the_plan.sweeps.values()
    )
    # --quick: one run of each kind (6 GPU runs, each paying its start) against 28 and the fleet
    assert plan.plan_selftest([h100], quick=True).estimate_s < the_plan.estimate_s * 0.4


def test_peak_tflops_reaches_the_gpu_sweeps_as_a_valid_sweep_key():
    gpu = plan.NodeFacts("a10g", cuda_available=True, ray_gpus=1.0, gpu_names=("NVIDIA A10G",))
    the_plan = plan.plan_selftest([gpu], peak_tflops=125.0)
    for key, spec in the_plan.sweeps.items():
        assert spec["peak_tflops"] == 125.0
        assert parse_spec(spec, f"{key}.yaml").peak_tflops == 125.0
    with pytest.raises(ValueError, match="peak_tflops: 0; allowed: a number of TFLOP/s above 0"):
        plan.plan_selftest([gpu], peak_tflops=0)


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "nan"])
def test_the_peak_tflops_flag_refuses_what_is_not_a_positive_number(bad):
    parser = argparse.ArgumentParser()
    cmd.add_parser(parser.add_subparsers())
    with pytest.raises(SystemExit):
        parser.parse_args(["selftest", "--peak-tflops", bad])
    args = parser.parse_args(["selftest", "--peak-tflops", "125", "--dry-run"])
    assert (args.peak_tflops, args.dry_run) == (125.0, True)
