"""A Slurm allocation read from its environment (``orchestrator.raycluster.slurm``, pure), the
refusal of a sweep the allocation is too small for (``sweep.preflight.allocation_errors``,
``linksweep run`` exiting 2 before Ray starts) and the line a linksweep inside a job prints
(``commands.shared.slurm_line``, Ray's node table faked). The environments are the variables
Slurm 22.05 sets (sbatch(1), srun(1)); the batch script itself runs against a real Slurm in
tests/checks/test_slurm.py."""

from __future__ import annotations

import pytest

from orchestrator.cli import main
from orchestrator.commands import shared, sweeping
from orchestrator.raycluster import slurm
from orchestrator.sweep.preflight import allocation_errors
from orchestrator.sweep.spec import parse_spec

# --- hostlists ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, names",
    [
        ("vm", ("vm",)),
        ("node[01-03,07]", ("node01", "node02", "node03", "node07")),
        ("gpu[8-11]", ("gpu8", "gpu9", "gpu10", "gpu11")),
        ("a[1-2],login,b[007]", ("a1", "a2", "login", "b007")),
        ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
        ("node[098-101]-ib", ("node098-ib", "node099-ib", "node100-ib", "node101-ib")),
    ],
)
def test_nodelist_expands_as_scontrol_show_hostnames(text, names):
    assert slurm.expand_nodelist(text) == names


@pytest.mark.parametrize(
    "text, why",
    [("node[01-03", "unbalanced"), ("node[3-1]", "backwards"), ("node[a-b]", "not a number"),
     ("a,,b", "empty name")],
)  # fmt: skip
def test_bad_nodelist_names_what_is_wrong(text, why):
    with pytest.raises(slurm.SlurmEnvError, match=why):
        slurm.expand_nodelist(text)


def test_per_node_counts():
    assert slurm.expand_counts("72(x2),36") == (72, 72, 36)
    assert slurm.expand_counts("2") == (2,)
    with pytest.raises(slurm.SlurmEnvError, match="N or N"):
        slurm.expand_counts("2(y3)")


# --- the allocation -------------------------------------------------------------------------

JOB = {
    "SLURM_JOB_ID": "4711",
    "SLURM_JOB_NODELIST": "gpu[01-02],cpu07",
    "SLURM_JOB_CPUS_PER_NODE": "64(x2),16",
}


def test_allocation_from_env():
    alloc = slurm.allocation_from_env(JOB)
    assert alloc == slurm.Allocation("4711", ("gpu01", "gpu02", "cpu07"), (64, 64, 16))
    assert alloc.head == "gpu01"
    assert slurm.allocation_from_env({"PATH": "/bin"}) is None  # not inside a job


def test_allocation_whose_counts_disagree_with_its_nodes_is_refused():
    with pytest.raises(slurm.SlurmEnvError, match="counts 2 node"):
        slurm.allocation_from_env({**JOB, "SLURM_JOB_CPUS_PER_NODE": "64(x2)"})
    with pytest.raises(slurm.SlurmEnvError, match="SLURM_JOB_NODELIST is not"):
        slurm.allocation_from_env({"SLURM_JOB_ID": "1"})


# --- each node's share for ray start --------------------------------------------------------


@pytest.mark.parametrize(
    "env, gpus, source",
    [
        ({"SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}, 4, "SLURM_GPUS_ON_NODE"),
        ({"SLURM_STEP_GPUS": "0,1,3", "CUDA_VISIBLE_DEVICES": "0,1,2"}, 3, "SLURM_STEP_GPUS"),
        ({"SLURM_JOB_GPUS": "2,3"}, 2, "SLURM_JOB_GPUS"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, 8, "CUDA_VISIBLE_DEVICES"),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, 0, "none"),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0, "none"),  # CUDA's "no GPU", not "every GPU"
        ({}, 0, "none"),
    ],
)
def test_node_share_reads_gpus_slurm_gave(env, gpus, source):
    share = slurm.node_share({"SLURM_CPUS_ON_NODE": "32", **env})
    assert (share.cpus, share.gpus, share.gpus_from) == (32, gpus, source)


def test_ray_start_gets_exactly_the_share():
    gpu_node = slurm.node_share({"SLURM_CPUS_ON_NODE": "48", "SLURM_GPUS_ON_NODE": "8"})
    assert slurm.ray_resource_args(gpu_node) == ["--num-cpus=48", "--num-gpus=8"]
    # no CPU count from Slurm: Ray counts them; GPUs always explicit, 0 included
    assert slurm.ray_resource_args(slurm.node_share({})) == ["--num-gpus=0"]
    with pytest.raises(slurm.SlurmEnvError, match="SLURM_GPUS_ON_NODE"):
        slurm.node_share({"SLURM_GPUS_ON_NODE": "a100:2"})


def test_heterogeneous_nodes_each_give_their_own_share():
    """One task per node: each reads its own node's counts, not the batch host's."""
    shares = [slurm.node_share({"SLURM_CPUS_ON_NODE": c, "SLURM_GPUS_ON_NODE": g})
              for c, g in (("64", "8"), ("16", "0"))]  # fmt: skip
    assert [slurm.ray_resource_args(s) for s in shares] == [
        ["--num-cpus=64", "--num-gpus=8"],
        ["--num-cpus=16", "--num-gpus=0"],
    ]


def test_head_ip_skips_debian_loopback_when_other_nodes_must_dial_it():
    # Debian's /etc/hosts maps the hostname to 127.0.1.1
    assert slurm.pick_head_ip(["127.0.1.1"], ["127.0.0.1", "10.1.2.3"], n_nodes=2) == "10.1.2.3"
    assert slurm.pick_head_ip(["10.9.9.9"], ["10.1.2.3"], n_nodes=2) == "10.9.9.9"
    assert slurm.pick_head_ip(["127.0.0.1"], ["10.1.2.3"], n_nodes=1) == "127.0.0.1"
    assert slurm.pick_head_ip(["127.0.1.1"], ["169.254.1.1", "fe80::1"], n_nodes=3) is None


# --- does the sweep fit the allocation ------------------------------------------------------


def test_nodes_needed_by_placement():
    assert slurm.nodes_needed(4, None, ["pack"]) == 1
    assert slurm.nodes_needed(4, None, ["pack", "spread"]) == 4
    assert slurm.nodes_needed(8, 4, ["spread"]) == 2


def one_node_job(**over):
    return {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "vm", "SLURM_JOB_CPUS_PER_NODE": "2"} | over


def test_allocation_too_small_for_spread_is_refused_with_what_fits():
    spec = parse_spec({"name": "s", "world_size": 2, "grid": {"placement": ["spread"]}})
    [error] = allocation_errors(spec, one_node_job())
    assert "Slurm job 12 has 1 node (vm)" in error
    assert "on 2 nodes" in error and "sbatch --nodes=2" in error
    assert allocation_errors(spec, one_node_job(SLURM_JOB_NODELIST="n[1-2]",
                                                SLURM_JOB_CPUS_PER_NODE="2(x2)")) == []  # fmt: skip
    pack = parse_spec({"name": "p", "world_size": 2, "grid": {"placement": ["pack"]}})
    assert allocation_errors(pack, one_node_job()) == []
    assert allocation_errors(spec, {}) == []  # not in a job: the cluster's capacity check decides


def test_run_inside_a_short_allocation_exits_2_before_ray(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "spread.yaml"
    sweep.write_text("name: spread\nworld_size: 2\ngrid: {placement: [spread]}\n")
    for k, v in one_node_job().items():
        monkeypatch.setenv(k, v)
    joined = []  # refused before joining (or starting) any cluster
    monkeypatch.setattr(sweeping, "join_cluster", lambda address: joined.append(address))
    db = tmp_path / "r.duckdb"
    assert main(["run", str(sweep), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "Slurm job 12 has 1 node (vm)" in err
    assert not db.exists() and joined == []


# --- the line a linksweep inside a job prints -----------------------------------------------


def ray_node(host, ip):
    return {"node_id": host * 4, "hostname": host, "ip": ip, "cpus": 2.0, "gpus": 0.0}


def test_line_names_allocated_nodes_and_ray_nodes(monkeypatch):
    from orchestrator.raycluster import nodes

    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-3]"}
    monkeypatch.setattr(nodes, "alive_nodes", lambda: [ray_node("n1.cluster", "10.0.0.1"),
                                                        ray_node("n2", "10.0.0.2")])  # fmt: skip
    line = shared.slurm_line(env, embedded=False)
    assert line == (
        "inside Slurm job 7: 3 nodes allocated (n1, n2, n3); Ray: 2 nodes joined "
        "(n1 10.0.0.1, n2 10.0.0.2); allocated but not in Ray: n3"
    )
    monkeypatch.setattr(nodes, "alive_nodes", lambda: [ray_node("n1", "10.0.0.1")])
    assert "other allocated nodes stay idle" in shared.slurm_line(env, embedded=True)
    assert shared.slurm_line({}, embedded=True) is None


def test_line_with_slurm_names_that_are_not_hostnames_gives_counts_only():
    alloc = slurm.Allocation("8", ("a", "b"))
    line = slurm.describe(alloc, [ray_node("x", "10.0.0.1"), ray_node("y", "10.0.0.2")], False)
    assert line.endswith("Ray: 2 nodes joined (x 10.0.0.1, y 10.0.0.2)")


# --- what the batch script asks of Python (clusters/slurm/raynodes.py) ----------------------


def raynodes():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "clusters" / "slurm" / "raynodes.py"
    spec = importlib.util.spec_from_file_location("raynodes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_batch_check_refuses_a_short_allocation_and_passes_other_commands(tmp_path, monkeypatch):
    sweep = tmp_path / "spread.yaml"
    sweep.write_text("name: spread\nworld_size: 2\ngrid: {placement: [spread]}\n")
    for k, v in one_node_job().items():
        monkeypatch.setenv(k, v)
    helper = raynodes()
    db = str(tmp_path / "r.duckdb")
    assert helper.main(["check", "run", str(sweep), "--db", db]) == 2
    assert (
        helper.main(["check", "run", str(sweep), "--db", db, "--set", "grid.placement=[pack]"]) == 0
    )
    assert helper.main(["check", "fleet", "--db", str(tmp_path / "f.duckdb")]) == 0


def test_batch_node_starts_ray_with_this_nodes_share(monkeypatch):
    helper = raynodes()
    started = []
    monkeypatch.setattr(helper.os, "execv", lambda path, argv: started.append(argv))
    monkeypatch.setattr(
        helper.os,
        "environ",
        {"SLURM_CPUS_ON_NODE": "16", "SLURM_GPUS_ON_NODE": "4", "SLURMD_NODENAME": "gpu01"},
    )
    helper.main(["node", "head", "10.0.0.1", "6379", "/tmp/ray-7", "--dashboard-port=8300"])
    helper.main(["node", "worker", "10.0.0.1:6379", "/tmp/ray-7"])
    head, worker = (argv[1:] for argv in started)
    assert head == ["start", "--head", "--node-ip-address=10.0.0.1", "--port=6379",
                    "--temp-dir=/tmp/ray-7-gpu01", "--disable-usage-stats", "--block",
                    "--num-cpus=16", "--num-gpus=4", "--dashboard-port=8300"]  # fmt: skip
    assert worker == ["start", "--address=10.0.0.1:6379", "--temp-dir=/tmp/ray-7-gpu01",
                      "--disable-usage-stats", "--block", "--num-cpus=16", "--num-gpus=4"]  # fmt: skip
