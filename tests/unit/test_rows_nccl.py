"""rows: NCCL evidence of a run as stored: nvls/collnet, and a failed run's leftover logs."""

from __future__ import annotations

import datetime as dt

from orchestrator.raycluster.result import RunResult
from orchestrator.sweep.planner import RankPlacement, plan_runs
from orchestrator.sweep.rows import RunFacts, build_rows
from orchestrator.sweep.spec import parse_spec
from tests.captures import CAPTURES, needs
from workloads.contract import RankRecord

NCCL = CAPTURES / "nccl"
pytestmark = needs(NCCL)
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SPEC = parse_spec(
    {
        "name": "p",
        "world_size": 2,
        "seq_len": 32,
        "micro_batch_size": 2,
        "steps": 3,
        "warmup_steps": 1,
        "links": {"default": {}, "no_p2p": {"NCCL_P2P_DISABLE": 1}},
    }
)
BY_LINK = {p.variant.link: p for p in plan_runs(SPEC)}


def _rank(r: int, log: str) -> RankRecord:
    return RankRecord(
        rank=r, local_rank=r, backend="nccl", device=f"cuda:{r}", created_wall_s=0.0, nccl_log=log
    )


def test_nvls_set_up_on_a_no_p2p_link_is_stored_and_flagged():
    log = (NCCL / "nccl_tests_213_nvls_comm.log").read_text()
    result = RunResult(rank_records=[_rank(0, log), _rank(1, "")])
    rows = build_rows(RunFacts(SPEC, "s", BY_LINK["no_p2p"], "r", NOW, NOW), result)
    assert rows.run["nvls"] is True
    assert rows.run["collnet"] is None
    assert rows.run["link_check"] == "mismatch"  # P2P and NVLS on a link that disabled P2P


def test_no_nvls_and_no_collnet_are_stored_as_false():
    log = (NCCL / "nccl_1189_h20_zero_collnet_nvls_channels.log").read_text()
    result = RunResult(rank_records=[_rank(0, log), _rank(1, log)])
    rows = build_rows(RunFacts(SPEC, "s", BY_LINK["default"], "r", NOW, NOW), result)
    assert (rows.run["nvls"], rows.run["collnet"]) == (False, False)


def test_link_check_reads_the_env_the_ranks_ran_with():
    """The run env (runs.rank_env) decides, not the link's own variables: the planner adds
    NCCL_NVLS_ENABLE=0 to a P2P-disabled link, and a user's NCCL_NVLS_ENABLE=1 there means NVLS
    was allowed on that link."""
    log = (
        "h:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
        "h:1:2 [0] NCCL INFO NVLS comm 0x55a7be5601c0 headRank 0 nHeads 2 buffSize 4194304\n"
    )
    result = RunResult(rank_records=[_rank(0, log), _rank(1, "")])
    no_p2p = BY_LINK["no_p2p"]

    def check(rank_env):
        rows = build_rows(RunFacts(SPEC, "s", no_p2p, "r", NOW, NOW, rank_env=rank_env), result)
        return rows.run["link_check"]

    assert check(None) == "mismatch"  # the link's own env: P2P disabled, NVLS set up anyway
    assert check({"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}) == "mismatch"
    assert check({"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "1"}) == "ok"


def test_failed_run_keeps_the_transports_of_its_leftover_logs():
    """A failed run returns no rank record: the logs read from its nodes after it ended are its
    transport evidence, each line's rank taken from the line (receive lines: peer -> me)."""
    text = (NCCL / "nccl_1814_ibext_v8_receive.log").read_text()
    placements = [RankPlacement(0, "n1", "h", "10.0.0.1", (), 11, 0, None)]
    result = RunResult(
        placements=placements,
        error="rank 0 failed: boom",
        nccl_logs={"h:/tmp/linksweep-nccl-r-h-11.log": text},
    )
    rows = build_rows(RunFacts(SPEC, "s", BY_LINK["default"], "r", NOW, NOW), result)
    assert rows.run["status"] == "failed"
    assert rows.run["effective_transport"] == "NET/IB"
    assert {(t["rank"], t["peer"]) for t in rows.transports} == {(39, 47), (38, 6)}
    assert len(rows.transports) == 12


def test_failed_run_without_logs_says_unknown():
    rows = build_rows(RunFacts(SPEC, "s", BY_LINK["default"], "r", NOW, NOW), RunResult(error="x"))
    assert rows.run["effective_transport"] is None
    assert rows.run["link_check"] == "unknown"
    assert rows.run["nvls"] is None


def test_every_nccl_log_is_kept_whole_with_its_source():
    """The raw logs are stored (``nccl_logs``) besides what was parsed from them: a rank's own
    log under its rank, a failed run's leftover file under host:path; gloo ranks have none."""
    log = (NCCL / "nccl_tests_213_nvls_comm.log").read_text()
    ok = build_rows(RunFacts(SPEC, "s", BY_LINK["default"], "r", NOW, NOW), RunResult(rank_records=[_rank(0, log), _rank(1, "")]))  # fmt: skip
    assert ok.nccl_logs == [{"run_id": "r", "source": "rank 0", "text": log}]
    failed = RunResult(error="boom", nccl_logs={"h:/tmp/x.log": log})
    rows = build_rows(RunFacts(SPEC, "s", BY_LINK["default"], "r", NOW, NOW), failed)
    assert rows.nccl_logs == [{"run_id": "r", "source": "h:/tmp/x.log", "text": log}]
