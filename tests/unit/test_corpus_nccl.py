"""``parse_nccl_log`` against the corpus: 7 real ``NCCL_DEBUG=INFO`` excerpts, each with the parse
a correct reader gives (``shared/data/corpus/nccl/expected.json``: the bare ``X.Y.Z`` version or
``null``, and the sorted transport families of the ``via`` lines; sources in
``shared/data/corpus/SOURCES.md``). Both fields are linksweep's stored form (``to_json_dict``).

Older NCCL named SHM otherwise: the NCCL 2.5.7 capture's ``Ring 00 : 0[1b000] -> 7[41000] via
direct shared memory`` is NCCL 2.4-2.12's SHM line (``src/transport/shm.cc``), so SHM is right.
"""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.topology.nccl_log import parse_nccl_log, to_json_dict
from tests.captures import CORPUS, corpus_index, needs

DATA = CORPUS / "nccl"
pytestmark = needs(DATA)

FIELDS = {"nccl_version", "transports"}
# A connection line as every NCCL since 2.4 prints it, in either the Ring or the Channel form.
_CONNECTION = re.compile(r"NCCL INFO (?:Ring|Channel) \d+(?:/\d+)? : \d+.* via ")


def expected() -> dict[str, dict]:
    return json.loads((DATA / "expected.json").read_text())


def names() -> list[str]:
    # Collected even where the corpus is absent (the module is then skipped, saying why).
    return sorted(expected()) if DATA.is_dir() else []


def test_every_capture_has_an_expected_parse_and_a_source():
    assert len(list(DATA.glob("*.log"))) == 7
    assert corpus_index(DATA, "*.log", expected()) == []


@pytest.mark.parametrize("name", names())
def test_parse_matches_expected(name):
    want = expected()[name]
    assert set(want) == FIELDS, "expected.json has a field this test does not compare"
    stored = to_json_dict(parse_nccl_log((DATA / name).read_text()))
    assert stored["nccl_version"] == want["nccl_version"]
    assert stored["transports"] == want["transports"]


@pytest.mark.parametrize("name", names())
def test_every_connection_line_is_read(name):
    text = (DATA / name).read_text()
    log = parse_nccl_log(text)
    assert len(log.channels) == sum(1 for ln in text.splitlines() if _CONNECTION.search(ln))
    assert len(log.channels) > 0


def test_old_ring_format_reads_shm_and_the_receiver():
    name = "04_nccl-2.5.7-roce-2node_old-ring-format_ib-ipc-direct-shared-memory.log"
    by_detail = {c.detail: c for c in parse_nccl_log((DATA / name).read_text()).channels}
    shm = by_detail["direct shared memory"]
    assert (shm.transport, shm.rank, shm.peer) == ("SHM", 0, 7)
    # "Ring 00 : 15[41000] -> 0[1b000] [receive] via NET/IB/0" is rank 0's line; its peer is 15.
    ib = by_detail["NET/IB/0"]
    assert (ib.transport, ib.rank, ib.peer, ib.direction) == ("NET/IB", 0, 15, "receive")
