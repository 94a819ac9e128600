"""NVLS and CollNet from NCCL logs, ``[receive]`` peers, and link_check's NVLS rule.

Fixtures (real public captures) and their sources: shared/data/captures/nccl/SOURCES.md. The line forms
that no stored capture had (CollNet connections) are built from NCCL's own format strings and
marked so.
"""

from __future__ import annotations

import pytest

from orchestrator.topology.nccl_log import (
    any_true,
    collnet_used,
    link_check,
    nvls_used,
    parse_nccl_log,
    to_json_dict,
    transport_families,
)
from tests.captures import CAPTURES, needs

DATA = CAPTURES / "nccl"
pytestmark = needs(DATA)


def load(name: str):
    return parse_nccl_log((DATA / name).read_text())


# --------------------------------------------------------------------------- NVLS, real logs


def test_nvls_comm_lines_mean_nvls_set_up():
    log = load("nccl_tests_213_nvls_comm.log")
    assert nvls_used(log) is True
    assert transport_families(log) == ["P2P"]
    assert to_json_dict(log)["nvls"] is True


def test_nvls_heads_mean_nvls_set_up():
    assert nvls_used(load("nccl_1538_nvls_heads.log")) is True


def test_multicast_available_alone_says_support_not_use():
    log = load("nccl_1538_nvls_multicast_available.log")
    assert log.nvls_support is True
    assert nvls_used(log) is None


def test_zero_nvls_channels_on_h800_means_no_nvls():
    log = load("nccl_892_h800_zero_nvls_channels.log")
    assert log.nvls_channels == 0
    assert nvls_used(log) is False
    assert transport_families(log) == ["P2P"]
    assert log.env_echo["NCCL_ALGO"] == "Tree,Ring,,CollnetDirect,CollnetChain,NVLS"


def test_zero_collnet_and_nvls_channels():
    log = load("nccl_1189_h20_zero_collnet_nvls_channels.log")
    assert (nvls_used(log), collnet_used(log)) == (False, False)
    assert to_json_dict(log) == {
        "nccl_version": None,
        "transports": [],
        "nvls": False,
        "collnet": False,
    }


def test_gb200_mnnvl_excerpt_echoes_nvls_enable_but_shows_no_use():
    log = load("nccl_1769_gb200_mnnvl_nvls_enable.log")
    assert log.env_echo == {"NCCL_NVLS_ENABLE": "1"}
    assert nvls_used(log) is None
    assert log.channels == ()


def test_nvswitch_box_over_shm_says_nothing_about_nvls():
    log = load("nccl_tests_228_nvswitch_shm.log")
    assert transport_families(log) == ["SHM"]
    assert {(c.rank, c.peer) for c in log.channels} >= {(7, 6), (1, 0), (4, 3)}
    assert nvls_used(log) is None


def test_sharp_plugin_loaded_is_not_collnet_use():
    log = load("nccl_1584_sharp_collnet_plugin_ibext_v8.log")
    assert log.nccl_version == "2.24.3"
    assert log.collnet_plugin == "SHARP"
    assert collnet_used(log) is None
    assert log.nvls_support is True  # lines without the "host:pid [dev] NCCL INFO" prefix
    assert nvls_used(log) is None


def test_nvls_not_available_means_no_nvls():
    text = "h:1:2 [0] NCCL INFO NVLS multicast support is not available on dev 0\n"
    assert nvls_used(parse_nccl_log(text)) is False


def test_nvls_enable_echoed_zero_means_no_nvls():
    text = "h:1:2 [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0.\n"
    assert nvls_used(parse_nccl_log(text)) is False


# --------------------------------------------------------------------------- CollNet
# No stored public capture had these lines: they follow NCCL's format strings
# ("CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s", src/transport/coll_net.cc;
# "rank %d Connected CollNet", same file; "Communicator has %d nodes which is less than CollNet
# node threshold %d, disabling CollNet", src/init.cc).


@pytest.mark.parametrize(
    "line",
    [
        "h:1:2 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA",
        "h:1:2 [0] NCCL INFO CollNet 01/1 : 3 [receive] via COLLNET/SHARP/1",
        "h:1:2 [0] NCCL INFO rank 0 Connected CollNet",
    ],
)
def test_collnet_connection_lines_mean_collnet_set_up(line):
    log = parse_nccl_log(line + "\n")
    assert collnet_used(log) is True
    assert log.channels == ()  # not a rank-to-rank channel


def test_collnet_disabled_below_node_threshold():
    text = (
        "h:1:2 [0] NCCL INFO Communicator has 1 nodes which is less than CollNet node "
        "threshold 2, disabling CollNet\n"
    )
    assert collnet_used(parse_nccl_log(text)) is False


def test_any_true_over_ranks():
    assert any_true([None, False, True]) is True
    assert any_true([None, False]) is False
    assert any_true([None, None]) is None
    assert any_true([]) is None


# --------------------------------------------------------------------------- [receive] peers


def test_receive_line_peer_is_the_sender():
    # "47[7] -> 39[7] [receive]" is printed by rank 39 (device 7) receiving from rank 47:
    # NCCL's recvSetup prints peer -> me (src/transport/net.cc).
    log = load("nccl_1814_ibext_v8_receive.log")
    assert transport_families(log) == ["NET/IB"]
    first = log.channels[0]
    assert (first.rank, first.peer, first.direction) == (39, 47, "receive")
    assert {(c.rank, c.peer) for c in log.channels} == {(39, 47), (38, 6)}


def test_send_line_keeps_left_as_rank():
    text = "h:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0\n"
    (line,) = parse_nccl_log(text).channels
    assert (line.rank, line.peer) == (1, 0)


# --------------------------------------------------------------------------- link_check + NVLS

NO_P2P = {"NCCL_P2P_DISABLE": "1"}


def test_no_p2p_link_with_nvls_set_up_is_a_mismatch():
    assert link_check(NO_P2P, ["SHM"], "NV18", nvls=True) == "mismatch"
    # the planner's own NCCL_NVLS_ENABLE=0 on a no_p2p link: NVLS appearing anyway is wrong too
    assert link_check({**NO_P2P, "NCCL_NVLS_ENABLE": "0"}, ["SHM"], "NV18", True) == "mismatch"


def test_no_p2p_link_that_enables_nvls_explicitly_is_ok():
    assert link_check({**NO_P2P, "NCCL_NVLS_ENABLE": "1"}, ["SHM"], "NV18", nvls=True) == "ok"


@pytest.mark.parametrize("nvls", [False, None])
def test_no_p2p_link_without_nvls_evidence_is_ok(nvls):
    assert link_check(NO_P2P, ["SHM"], "NV18", nvls=nvls) == "ok"


def test_nvls_on_a_p2p_link_is_fine():
    assert link_check({}, ["P2P"], "NV18", nvls=True) == "ok"


def test_real_logs_through_link_check():
    nvls_log = load("nccl_tests_213_nvls_comm.log")
    fams = transport_families(nvls_log)
    assert link_check({}, fams, "NV18", nvls_used(nvls_log)) == "ok"
    h800 = load("nccl_892_h800_zero_nvls_channels.log")
    assert link_check(NO_P2P, transport_families(h800), "NV8", nvls_used(h800)) == "mismatch"
