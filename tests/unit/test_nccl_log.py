"""Tests for orchestrator.topology.nccl_log against real NCCL_DEBUG=INFO logs from public issues.

Fixtures and their sources: shared/data/captures/nccl/SOURCES.md (tests/captures.py).
"""

from __future__ import annotations

import pytest

from orchestrator.topology.nccl_log import (
    GLOO_TRANSPORT,
    NcclLog,
    TransportLine,
    collnet_used,
    effective_transport,
    link_check,
    parse_nccl_log,
    to_json_dict,
    transport_families,
    transport_family,
)
from tests.captures import CAPTURES, needs

DATA = CAPTURES / "nccl"
pytestmark = needs(DATA)


def load(name: str) -> NcclLog:
    return parse_nccl_log((DATA / name).read_text())


def test_every_fixture_has_a_source():
    sources = (DATA / "SOURCES.md").read_text()
    files = sorted(p.name for p in DATA.glob("*.log"))
    assert len(files) >= 4
    for name in files:
        assert f"`{name}`" in sources, name


# --------------------------------------------------------------------------- versions and env


def test_version_line_and_no_channels_yet():
    log = load("nccl_1637_rtx5090_p2p_disable_init.log")
    assert log.nccl_version == "2.25.1"
    assert log.channels == ()
    assert to_json_dict(log) == {
        "nccl_version": "2.25.1",
        "transports": [],
        "nvls": None,
        "collnet": None,
    }


def test_torch_process_group_version_line():
    assert load("modded_nanogpt_15_torch_pg_nccl_version.log").nccl_version == "2.21.5"


def test_env_echo_new_style():
    log = load("nccl_tests_373_ibext_env.log")
    assert log.env_echo == {"NCCL_P2P_LEVEL": "LOC"}
    assert log.nccl_version is None


def test_env_echo_old_style_with_period_and_trailing_spaces():
    log = load("returnn_1469_p2p_disable_env.log")
    assert log.env_echo == {"NCCL_IB_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC"}
    assert transport_families(log) == []


# --------------------------------------------------------------------------- transports


def test_p2p_ipc_read_and_net_socket():
    log = load("nccl_952_ipc_read_socket.log")
    assert transport_families(log) == ["NET/Socket", "P2P"]
    assert log.channels[0] == TransportLine(8, 1, 15, "P2P", "P2P/IPC/read", None)
    socket = [c for c in log.channels if c.transport == "NET/Socket"]
    assert socket[0] == TransportLine(15, 3, 6, "NET/Socket", "NET/Socket/3", "send")
    assert len(log.channels) == 16


def test_ib_gdrdma_and_cumem():
    log = load("nccl_1189_h20_ib_gdrdma_cumem.log")
    assert transport_families(log) == ["NET/IB", "P2P"]
    # "0[0] -> 2[0] [receive]" is printed by rank 2, receiving from rank 0 (peer -> me)
    assert log.channels[0] == TransportLine(2, 7, 0, "NET/IB", "NET/IB/3/GDRDMA", "receive")
    assert log.channels[5].direction == "send"
    assert log.channels[9] == TransportLine(3, 0, 2, "P2P", "P2P/CUMEM", None)
    assert effective_transport(transport_families(log)) == "P2P+NET/IB"


def test_socket_and_old_style_shm_channel_without_conn_index():
    log = load("nccl_tests_166_socket_shm.log")
    assert transport_families(log) == ["NET/Socket", "SHM"]
    shm = [c for c in log.channels if c.transport == "SHM"]
    assert shm[0] == TransportLine(6, 9, 7, "SHM", "SHM/direct/direct", None)
    assert shm[1].rank == 11 and shm[1].peer == 12 and shm[1].channel == 5
    assert effective_transport(transport_families(log)) == "SHM+NET/Socket"


def test_shm_only_and_p2p_direct_pointer_same_machine():
    shm = load("nccl_1817_shm.log")
    p2p = load("nccl_1817_p2p_direct_pointer.log")
    assert transport_families(shm) == ["SHM"]
    assert {c.detail for c in shm.channels} == {"SHM/direct/direct"}
    assert transport_families(p2p) == ["P2P"]
    assert p2p.channels[0] == TransportLine(0, 1, 3, "P2P", "P2P/direct pointer", None)
    assert effective_transport(transport_families(shm)) == "SHM"
    assert effective_transport(transport_families(p2p)) == "P2P"


def test_bus_id_ranks_and_connected_lines_ignored():
    log = load("megatron_516_busid_ipc_read.log")
    assert len(log.channels) == 10  # 8 "Connected all rings" lines skipped
    assert log.channels[0] == TransportLine(2, 23, 3, "P2P", "P2P/IPC/read", None)
    assert log.channels[-1].rank == 7 and log.channels[-1].peer == 6


def test_ibext_plugin_counts_as_ib():
    log = load("nccl_tests_373_ibext_env.log")
    assert transport_families(log) == ["NET/IB"]
    assert log.channels[0].detail == "NET/IBext_v8/1"
    assert [c.direction for c in log.channels] == ["receive", "receive", "send"]


def test_cumem_read_with_timestamp_lines():
    log = load("aws_ofi_nccl_715_cumem_read_timestamps.log")
    assert len(log.channels) == 12
    assert {c.detail for c in log.channels} == {"P2P/CUMEM/read"}
    assert log.channels[3] == TransportLine(0, 1, 1, "P2P", "P2P/CUMEM/read", None)


def test_old_channel_form_with_bus_ids_over_ib():
    log = load("nccl_707_a100_ib_gdrdma_busid.log")
    assert transport_families(log) == ["NET/IB"]
    # "2[c7000] -> 0[87000] [receive]": rank 0's line, its peer is rank 2
    assert log.channels[0] == TransportLine(0, 1, 2, "NET/IB", "NET/IB/5/GDRDMA", "receive")


def test_ring_topology_lines_are_not_connections():
    log = load("nccl_tests_307_rtx4090_shm_ring.log")
    assert len(log.channels) == 9
    assert transport_families(log) == ["SHM"]
    assert log.channels[3] == TransportLine(0, 0, 1, "SHM", "SHM/direct/direct", None)


def test_direct_pointer_read_and_plain_ib():
    log = load("nccl_1412_ib_direct_pointer_read.log")
    assert transport_families(log) == ["NET/IB", "P2P"]
    assert log.channels[1] == TransportLine(5, 3, 12, "NET/IB", "NET/IB/3", "send")
    assert log.channels[0].detail == "P2P/direct pointer/read"


def test_ray_worker_prefix():
    text = (DATA / "nccl_1817_shm.log").read_text()
    prefixed = "".join(f"(RayTrainWorker pid=83500) {ln}" for ln in text.splitlines(True))
    assert parse_nccl_log(prefixed) == parse_nccl_log(text)


def test_transport_family():
    assert transport_family("P2P/CUMEM/read") == "P2P"
    assert transport_family("SHM/direct") == "SHM"
    assert transport_family("NET/Socket/0") == "NET/Socket"
    assert transport_family("NET/IB/0/GDRDMA") == "NET/IB"
    assert transport_family("NET/IBext/0") == "NET/IB"
    assert transport_family("NET/AWS Libfabric/0/GDRDMA") == "NET/AWS Libfabric"


def test_shm_under_its_pre_2_13_name():
    # NCCL 2.4 to 2.12 named the SHM transport "direct shared memory" (src/transport/shm.cc,
    # "Ring %02d : %d[%lx] -> %d[%lx] via direct shared memory"); 2.13 renamed it SHM/<send>/<recv>.
    assert transport_family("direct shared memory") == "SHM"
    log = parse_nccl_log(
        " [0] NCCL INFO Ring 00 : 0[1b000] -> 7[41000] via direct shared memory\n"
        "host:1:2 [1] NCCL INFO Channel 01 : 1[1c000] -> 2[3d000] via direct shared memory\n"
    )
    assert log.channels[0] == TransportLine(0, 0, 7, "SHM", "direct shared memory", None)
    assert transport_families(log) == ["SHM"]
    # An NVLink variant whose ranks fell back to host memory is caught under either name.
    assert link_check({}, transport_families(log), "NV2") == "mismatch"


def test_collnet_connection_under_its_2_6_to_2_8_name():
    # NCCL 2.6 to 2.8 printed CollNet connections as "Coll %02d : %d [send] via COLLNET/%s/%d%s"
    # (src/transport/coll_net.cc); 2.9 renamed the line "CollNet %02d : ...".
    log = parse_nccl_log(
        "h:1:2 [0] NCCL INFO Coll 00 : 0 [send] via COLLNET/SHARP/0/GDRDMA\n"
        "h:1:2 [0] NCCL INFO Coll 00 : 0 [receive] via COLLNET/SHARP/0/GDRDMA\n"
    )
    assert collnet_used(log) is True
    assert log.channels == ()  # not a rank-to-rank channel: no transport family of its own


# --------------------------------------------------------------------------- effective / check


def test_effective_transport():
    assert effective_transport([]) == "unknown"
    assert effective_transport(["SHM", "P2P"]) == "P2P+SHM"
    assert effective_transport(["NET/Socket"]) == "NET/Socket"
    assert GLOO_TRANSPORT == "gloo/tcp"


def test_link_check_on_real_logs():
    p2p = transport_families(load("nccl_1817_p2p_direct_pointer.log"))
    shm = transport_families(load("nccl_1817_shm.log"))
    socket_shm = transport_families(load("nccl_tests_166_socket_shm.log"))
    none = transport_families(load("nccl_1637_rtx5090_p2p_disable_init.log"))
    disable_p2p = {"NCCL_P2P_DISABLE": "1"}
    disable_both = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}

    # The variant asked for no P2P: SHM is right, P2P is not.
    assert link_check(disable_p2p, shm, "NV12") == "ok"
    assert link_check(disable_p2p, p2p, "NV12") == "mismatch"
    # P2P and SHM both off: only NET is right.
    assert link_check(disable_both, shm, "PHB") == "mismatch"
    assert link_check(disable_both, ["NET/Socket"], "PHB") == "ok"
    # Default env on an NVLink pair: SHM or NET means NVLink was not measured.
    assert link_check({}, p2p, "NV12") == "ok"
    assert link_check({}, shm, "NV4") == "mismatch"
    assert link_check({}, socket_shm, "NV18") == "mismatch"
    # Default env on a PHB box: NCCL picks SHM by itself, which is fine.
    assert link_check({}, shm, "PHB") == "ok"
    # NCCL_P2P_LEVEL=LOC disables P2P like NCCL_P2P_DISABLE=1 does.
    assert link_check({"NCCL_P2P_LEVEL": "LOC"}, p2p, "NV12") == "mismatch"
    assert link_check({"NCCL_P2P_DISABLE": "0"}, p2p, "NV12") == "ok"
    # No channel lines: nothing verified.
    assert link_check(disable_p2p, none, "NV12") == "unknown"
    assert link_check({}, [], "unknown") == "unknown"


@pytest.mark.parametrize("value", ["1", " 1", "0x1", "01", "1abc"])
def test_link_check_reads_flags_as_integers(value):
    # NCCL: strtol(value, NULL, 0) == 1 (src/graph/paths.cc ncclGetLevel)
    assert link_check({"NCCL_P2P_DISABLE": value}, ["P2P"], "PIX") == "mismatch"


@pytest.mark.parametrize("value", ["2", "-1", "true", "yes", "", "0"])
def test_p2p_disable_other_than_one_leaves_p2p_on(value):
    # NCCL honours NCCL_P2P_DISABLE only when it reads as exactly 1; "2" or "true" do nothing,
    # so P2P is allowed and using it is no mismatch.
    assert link_check({"NCCL_P2P_DISABLE": value}, ["P2P"], "PIX") == "ok"


@pytest.mark.parametrize(("value", "off"), [("1", True), ("2", False), ("true", False)])
def test_shm_disable_is_on_only_at_one(value, off):
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": value}
    assert link_check(env, ["SHM"], "PHB") == ("mismatch" if off else "ok")


@pytest.mark.parametrize(
    ("level", "off"), [("LOC", True), ("0", True), ("00", True), ("loc", False), ("NVL", False)]
)
def test_p2p_level_loc_as_nccl_reads_it(level, off):
    # strcmp against "LOC" (case-sensitive), or an old-style number whose strtol is 0
    assert link_check({"NCCL_P2P_LEVEL": level}, ["P2P"], "NV12") == ("mismatch" if off else "ok")
