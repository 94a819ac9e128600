"""The emulated cluster for real (root only), plus `netns_available` on this machine.

The tests bring up 2 nodes in network namespaces with an unshaped link `fast` and a `slow`
link shaped to 100 mbit, drive Ray from the root namespace in a subprocess (this process
keeps the session's single Ray connection, see conftest.py), measure a gloo all_reduce
through each link, and check that `down` leaves the machine as it found it, also after `up`
is killed midway. The pure pieces (plan, parsing, argv) are in
tests/unit/test_emulated_plan.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.emulated import LinkShape, cluster_unavailable, netns_available
from orchestrator.store import read_query

# quiet lane (tests/lanes.py): shaped links measured against their rate; its own emulated cluster
pytestmark = pytest.mark.quiet

REPO = Path(__file__).resolve().parents[2]
SLOW_RATE = "100mbit"  # 16 MiB all_reduce takes ~1.3 s: long enough to time, short enough
TEST_PREFIX = "lst"  # not the default "ls", so a user's own emulated cluster is never touched


def test_netns_available_explains_itself():
    ok, why = netns_available()
    assert isinstance(ok, bool) and why
    if os.geteuid() != 0:
        assert not ok and "needs root" in why


# --------------------------------------------------------------------------------------
# A real emulated cluster (root only)


def _run(cmd: list[str], **kw) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, **kw).stdout


def _snapshot() -> dict[str, object]:
    """What `down` must restore: namespaces, root-namespace links and qdiscs."""
    links = _run(["ip", "-o", "link", "show"])
    return {
        "netns": {line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines()},
        "links": {line.split(": ")[1].split("@")[0] for line in links.splitlines()},
        "qdiscs": _run(["tc", "qdisc", "show"]),
    }


def _py(code: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run Python in a subprocess from the repo root (never in this process: see conftest)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_DISABLE_USAGE_STATS="1")
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


@pytest.fixture
def root_netns():
    if why := cluster_unavailable():
        pytest.skip(why)


@pytest.fixture
def state_dir():
    # Short and unique: Ray's socket paths below it must stay under 107 bytes.
    path = Path(f"/tmp/lst-{os.getpid()}")
    yield path
    if (path / "state.json").exists():  # a test failed before its own down
        _py(f"from orchestrator.emulated import down; down({str(path)!r})", 120)


def _assert_clean(before: dict[str, object], pids: list[int]) -> None:
    after = _snapshot()
    ours = {ns for ns in after["netns"] if ns.startswith(TEST_PREFIX)}
    assert not ours, f"namespaces left: {ours}"
    assert after["links"] == before["links"]
    assert not any(name.startswith(f"{TEST_PREFIX}-") for name in after["links"])
    assert after["qdiscs"] == before["qdiscs"]
    alive = [p for p in pids if Path(f"/proc/{p}").exists() and _state(p) not in ("Z", "X")]
    assert not alive, f"Ray processes left: {alive}"


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    return stat[stat.rindex(")") + 2]


UP = """
from orchestrator.emulated import parse_link_arg, up
print(up(2, [parse_link_arg('fast'), parse_link_arg('slow={rate}')], {state_dir!r},
         prefix={prefix!r}))
"""

DRIVER = """
import json, ray
from orchestrator.emulated import measure_link_busbw
ray.init(address={address!r}, logging_level="ERROR", log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
out = {{"nodes": [[n["NodeManagerAddress"], sorted(n["Resources"])] for n in nodes]}}
for link in ("slow", "fast"):
    out[link] = measure_link_busbw({address!r}, link)
print(json.dumps(out))
"""


@pytest.mark.root
@pytest.mark.slow
def test_emulated_cluster_shapes_links_and_cleans_up(root_netns, state_dir, tmp_path):
    before = _snapshot()
    pids: list[int] = []
    try:
        t0 = time.monotonic()
        proc = _py(UP.format(rate=SLOW_RATE, state_dir=str(state_dir), prefix=TEST_PREFIX), 180)
        assert proc.returncode == 0, proc.stderr
        address = proc.stdout.strip().splitlines()[-1]
        state = json.loads((state_dir / "state.json").read_text())
        pids = [p for group in state["pids"].values() for p in group]
        plan = state["plan"]
        print(f"up in {time.monotonic() - t0:.1f} s at {address}")

        st = json.loads(
            _py(
                "import json; from orchestrator.emulated import status; "
                f"print(json.dumps(status({str(state_dir)!r})))",
                60,
            ).stdout
        )
        assert st["up"] and st["head_alive"]
        assert [n["alive"] for n in st["nodes"]] == [True, True]
        slow = next(link for link in st["links"] if link["name"] == "slow")
        assert all("tbf" in q and "100Mbit" in q for q in slow["qdiscs"].values())

        t1 = time.monotonic()
        proc = _py(DRIVER.format(address=address), 240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"link check (slow, fast) in {time.monotonic() - t1:.1f} s")

        # A real linksweep sweep on the emulated cluster: link microbenchmark + DDP, spread.
        sweep = tmp_path / "sweep.yaml"  # not beside the state folder: /tmp keeps nothing
        db = tmp_path / "sweep.duckdb"
        sweep.write_text(SWEEP)
        t1 = time.monotonic()
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "run",
                str(sweep),
                "--db",
                str(db),
                "--address",
                address,
            ],
            cwd=REPO,
            env=dict(os.environ, RAY_DISABLE_USAGE_STATS="1"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
        print(f"sweep (link benchmark, 2 runs) in {time.monotonic() - t1:.1f} s")
        _, runs = read_query(str(db), "SELECT link, status, nodes FROM runs ORDER BY seq")
        _, bench = read_query(
            str(db),
            "SELECT link, busbw_gbps FROM link_bandwidth WHERE collective = 'all_reduce' "
            "QUALIFY row_number() OVER (PARTITION BY link ORDER BY msg_bytes DESC) = 1",
        )
    finally:
        t1 = time.monotonic()
        down = _py(f"from orchestrator.emulated import down; down({str(state_dir)!r})", 120)
        print(f"down in {time.monotonic() - t1:.1f} s")
    assert down.returncode == 0, down.stderr

    # Two emulated nodes on their own ctl addresses, plus the head on ls-host.
    emulated = {ip: res for ip, res in out["nodes"] if any("emulated_node_" in r for r in res)}
    assert sorted(emulated) == sorted(n["ip"] for n in plan["nodes"])
    assert plan["head_ip"] in {ip for ip, _ in out["nodes"]}

    rate_gbps = LinkShape("slow", SLOW_RATE).rate_bits_per_s / 8 / 1e9
    slow, fast = out["slow"], out["fast"]
    print(
        f"busbw slow {slow['busbw_gbps']:.4f} GB/s (tc rate {rate_gbps:.4f}), "
        f"fast {fast['busbw_gbps']:.4f} GB/s"
    )
    assert slow["busbw_gbps"] == pytest.approx(rate_gbps, rel=0.30)
    assert fast["busbw_gbps"] >= 3 * slow["busbw_gbps"]
    # The bytes really went through the chosen interface: a 2-rank ring sends S per rank.
    for r in (slow, fast):
        for sent in r["link_tx_bytes_per_rank"]:
            assert sent >= 0.9 * r["msg_bytes"] * r["iters"]

    # Each run's ranks sat on different emulated nodes, and gloo used the link it was told to:
    # the stored microbenchmark's slow all_reduce runs at the tc rate, fast several times higher.
    assert [(link, status) for link, status, _ in runs] == [("fast", "ok"), ("slow", "ok")]
    for _, _, nodes in runs:
        assert len({n["node_id"] for n in json.loads(nodes)}) == 2
    busbw = dict(bench)
    print(f"linksweep link_bandwidth all_reduce busbw: {busbw}")
    assert busbw["slow"] == pytest.approx(rate_gbps, rel=0.30)
    assert busbw["fast"] >= 3 * busbw["slow"]

    _assert_clean(before, pids)
    assert not state_dir.exists()


SWEEP = """
name: emulated-it
seq_len: 32
micro_batch_size: 1
steps: 2
warmup_steps: 1
repeats: 1
world_size: 2
linkbench_max_mb: 1  # 1 MiB at 100 mbit: 84 ms a message, far past the 64 KiB token bucket
links:
  fast: {GLOO_SOCKET_IFNAME: ls-fast}
  slow: {GLOO_SOCKET_IFNAME: ls-slow}
grid: {strategy: [ddp], placement: [spread], linkbench: true}
"""


@pytest.mark.root
@pytest.mark.slow
def test_down_after_up_was_killed_midway(root_netns, state_dir):
    before = _snapshot()
    up = subprocess.Popen(
        [
            sys.executable,
            "-c",
            UP.format(rate=SLOW_RATE, state_dir=str(state_dir), prefix=TEST_PREFIX),
        ],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state_file = state_dir / "state.json"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # killed once the Ray head is up
            try:
                if json.loads(state_file.read_text())["pids"].get("head"):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        else:
            pytest.fail("up never got as far as the Ray head")
    finally:
        up.send_signal(signal.SIGKILL)
        up.wait()
    pids = json.loads(state_file.read_text())["pids"]["head"]
    down = _py(f"from orchestrator.emulated import down; down({str(state_dir)!r})", 120)
    assert down.returncode == 0, down.stderr
    _assert_clean(before, pids)
