"""Planted faults on a real emulated cluster (root only): a slow node and a slow pair.

One cluster of 4 nodes with only the ctl link, `--slow-node 3=50mbit` and
`--slow-pair 0-1=50mbit`; a gloo all_reduce through ls-ctl between pairs of nodes
(`measure_link_busbw`, run in a subprocess: this process keeps the session's single Ray
connection, see conftest.py): (0,2) and (1,2) are healthy, (0,1) runs at the pair's rate
and (2,3) at the slow node's; node 3's ingress qdisc carried the bytes sent to it; `status`
lists the faults and `down` leaves the machine as it found it. One cluster for both kinds
of fault (4 nodes rather than two clusters of 3): one `up` instead of two on a 2-core box.
`plant_faults` on the running cluster (what the shared cluster of tests/integration/conftest.py
plants its slow node with): cleared, no qdisc of a fault is left and `status` lists none;
planted again, every namespace's qdiscs read exactly as `up` made them.
The pure pieces are in tests/unit/test_emulated_faults.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.emulated import LinkShape, cluster_unavailable

# alone (tests/lanes.py): the slow node and pair measured as slow, and only they; its own emulated cluster
pytestmark = pytest.mark.alone

REPO = Path(__file__).resolve().parents[2]
PREFIX = "lsf"  # not "ls" (a user's cluster) nor "lst" (tests/integration/test_emulated.py)
FAULT_RATE = "50mbit"  # a 4 MiB all_reduce of 2 ranks: ~0.7 s per iteration
MSG_BYTES = 4 * 2**20
ITERS = 3

UP = """
from orchestrator.emulated import parse_slow_node_arg, parse_slow_pair_arg, up
faults = [parse_slow_node_arg('3={rate}'), parse_slow_pair_arg('0-1={rate}')]
print(up(4, [], {state_dir!r}, prefix={prefix!r}, faults=faults))
"""

REPLANT = r"""
import json, re, subprocess
from orchestrator.emulated import parse_slow_node_arg, parse_slow_pair_arg, plant_faults, status

def qdiscs():  # a counter (htb's unclassified packets) blanked: it restarts with the qdisc
    names = ["{prefix}sw", *(f"{prefix}n{{i}}" for i in range(4))]
    show = [["tc", "-n", ns, "qdisc", "show"] for ns in names]
    text = [subprocess.run(c, capture_output=True, text=True, check=True).stdout for c in show]
    return {{ns: re.sub(r"direct_packets_stat \d+", "", t) for ns, t in zip(names, text)}}

faults = [parse_slow_node_arg('3={rate}'), parse_slow_pair_arg('0-1={rate}')]
out = {{"at_up": qdiscs()}}
out["cleared_devices"] = plant_faults([], {state_dir!r})
out["cleared"] = qdiscs()
out["cleared_status_faults"] = status({state_dir!r})["faults"]
out["planted_devices"] = plant_faults(faults, {state_dir!r})
out["planted"] = qdiscs()
print(json.dumps(out))
"""

DRIVER = """
import json
from orchestrator.emulated import measure_link_busbw
out = {{}}
for a, b in [(0, 2), (1, 2), (0, 1), (2, 3)]:
    r = measure_link_busbw({address!r}, "ctl", nodes=(a, b), msg_bytes={msg}, iters={iters},
                           timeout_s=120)
    out[f"{{a}}-{{b}}"] = r
print(json.dumps(out))
"""


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def _snapshot() -> dict[str, object]:
    links = _run(["ip", "-o", "link", "show"])
    return {
        "netns": {line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines()},
        "links": {line.split(": ")[1].split("@")[0] for line in links.splitlines()},
        "qdiscs": _run(["tc", "qdisc", "show"]),
    }


def _py(args: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Python in a subprocess from the repo root (never Ray in this process: see conftest)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
        timeout=timeout_s,
    )  # fmt: skip


@pytest.fixture
def root_netns():
    if why := cluster_unavailable():
        pytest.skip(why)


@pytest.fixture
def state_dir():
    path = Path(f"/tmp/lsf-{os.getpid()}")  # short: Ray's socket paths stay < 107 bytes
    yield path
    if (path / "state.json").exists():  # a test failed before its own down
        _py(["-c", f"from orchestrator.emulated import down; down({str(path)!r})"], 120)


@pytest.mark.root
@pytest.mark.slow
def test_slow_node_and_slow_pair_are_slow_and_only_they(root_netns, state_dir):
    before = _snapshot()
    t0 = time.monotonic()
    try:
        up = _py(["-c", UP.format(rate=FAULT_RATE, state_dir=str(state_dir), prefix=PREFIX)], 240)
        assert up.returncode == 0, up.stderr[-3000:]
        address = up.stdout.strip().splitlines()[-1]
        state = json.loads((state_dir / "state.json").read_text())
        pids = [p for group in state["pids"].values() for p in group]
        t_up = time.monotonic() - t0

        st = _py(["-m", "orchestrator.emulated", "status", "--state-dir", str(state_dir)], 60)
        assert st.returncode == 0, st.stderr
        drive = _py(["-c", DRIVER.format(address=address, msg=MSG_BYTES, iters=ITERS)], 400)
        assert drive.returncode == 0, drive.stderr[-3000:]
        out = json.loads(drive.stdout.strip().splitlines()[-1])
        ingress = _run(["tc", "-s", "-n", f"{PREFIX}sw", "qdisc", "show", "dev", "n3-0"])
        code = REPLANT.format(prefix=PREFIX, rate=FAULT_RATE, state_dir=str(state_dir))
        replant = _py(["-c", code], 120)
        assert replant.returncode == 0, replant.stderr[-3000:]
    finally:
        down = _py(["-c", f"from orchestrator.emulated import down; down({str(state_dir)!r})"],
                   120)  # fmt: skip
    print(f"up {t_up:.1f} s, whole test {time.monotonic() - t0:.1f} s")
    assert down.returncode == 0, down.stderr

    # The state records the faults with the nodes' Ray IPs; status prints them.
    assert [(f["kind"], f["nodes"], f["rate"]) for f in state["faults"]] == [
        ("node", ["198.18.0.4"], FAULT_RATE),
        ("pair", ["198.18.0.1", "198.18.0.2"], FAULT_RATE),
    ]
    assert "fault      node 3 at 50mbit (198.18.0.4)" in st.stdout
    assert "fault      pair 0-1 at 50mbit (198.18.0.1, 198.18.0.2)" in st.stdout
    assert re.search(r"lsfn0/ls-ctl\s+qdisc htb 1: root", st.stdout), st.stdout
    assert re.search(r"lsfn3/ls-ctl\s+qdisc tbf 1: root .*rate 50Mbit", st.stdout), st.stdout
    assert re.search(r"lsfsw/n3-0\s+qdisc tbf 1: root .*rate 50Mbit", st.stdout), st.stdout

    busbw = {pair: r["busbw_gbps"] for pair, r in out.items()}
    print("busbw GB/s through ls-ctl: " + ", ".join(f"{k} {v:.4f}" for k, v in busbw.items()))
    rate_gbps = LinkShape("x", FAULT_RATE).rate_bits_per_s / 8 / 1e9
    # Never above the planted rate; at least half of it (measured 75-95% on 2 busy cores).
    for slow in ("0-1", "2-3"):  # the slow pair; a pair with the slow node
        assert 0.5 * rate_gbps <= busbw[slow] <= 1.1 * rate_gbps, busbw
    for healthy in ("0-2", "1-2"):  # node 0 and 1 with anyone else, node 2 without 3: fast
        assert busbw[healthy] >= 5 * rate_gbps, busbw
    # Node 3's ingress qdisc (its switch port's egress) carried what node 2 sent it.
    sent = int(re.search(r"Sent (\d+) bytes", ingress).group(1))
    assert sent >= MSG_BYTES * ITERS, ingress

    # Cleared by plant_faults: the ctl link is unshaped, so no device keeps a root qdisc of
    # its own (htb, tbf); planted again: every namespace reads as `up` left it.
    re_ = json.loads(replant.stdout.strip().splitlines()[-1])
    assert re_["cleared_status_faults"] == []
    assert len(re_["cleared_devices"]) == len(re_["planted_devices"]) > 0
    assert not any(k in text for text in re_["cleared"].values() for k in (" htb ", " tbf "))
    assert re_["planted"] == re_["at_up"], (re_["at_up"], re_["planted"])

    after = _snapshot()
    assert not {ns for ns in after["netns"] if ns.startswith(PREFIX)}
    assert after["links"] == before["links"] and after["qdiscs"] == before["qdiscs"]
    alive = [p for p in pids if Path(f"/proc/{p}").exists()]
    assert not [p for p in alive if _proc_state(p) not in ("Z", "X")], alive
    assert not state_dir.exists()


def _proc_state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat[stat.rindex(")") + 2]
