"""The fleet check as text (orchestrator/fleet/summary.py), on synthetic rows shaped like the
tables fleet_checks, fleet_nodes, fleet_pairs, fleet_rounds and the view fleet_suspects."""

from __future__ import annotations

import json
import re

from orchestrator.fleet.summary import (
    heatmap_text,
    node_label,
    node_labels,
    round_times,
    summary_text,
    suspects_text,
)

FLEET_ID = "fleet-20261124-0400-abc123"
SLOW_WHY = "pairs slow with 3 of 3 partners (median 0.0120 GB/s vs fleet 0.0480, MAD bound 0.0400)"


def node_id(k: int) -> str:
    return f"{k:02x}" * 28  # 56 hex digits, like a Ray node id


def tournament(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of a round-robin (circle method), enough for the synthetic fleets here."""
    ids = list(range(n)) + ([None] if n % 2 else [])
    m = len(ids)
    out = []
    for _ in range(m - 1):
        out.append(
            [
                (ids[i], ids[m - 1 - i])
                for i in range(m // 2)
                if None not in (ids[i], ids[m - 1 - i])
            ]
        )
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return out


def fleet(
    n: int = 4, slow: int | None = 2, failed: tuple[int, int] | None = None, links=("default",)
) -> dict:
    """A check of ``n`` nodes: inter-pair busbw 0.048 GB/s, intra 0.5; node ``slow`` at a
    quarter on every pair (its pairs slow, itself the suspect); ``failed``: that pair failed."""
    nodes = [
        {
            "fleet_id": FLEET_ID,
            "node_id": node_id(k),
            "ip": f"198.18.0.{k + 1}",
            "hostname": f"node{k}",
            "cpus": 2.0,
            "gpus": 0.0,
            "compute_tokens_per_s": 900.0 + k,
            "compute_status": "ok",
            "health": {"cpu": {"cpus": 2}},
            "health_note": "no GPU: NVML checks do not apply",
            "suspect": k == slow,
            "why": SLOW_WHY if k == slow else None,
        }
        for k in range(n)
    ]
    pairs, rounds = [], []
    for link in links:
        for k in range(n):
            pairs.append(
                {"fleet_id": FLEET_ID, "link": link, "kind": "intra", "round": None,
                 "node_a": node_id(k), "node_b": node_id(k), "world_size": 2, "backend": "gloo",
                 "msg_bytes": 1 << 24, "time_s": 0.1, "busbw_gbps": 0.5, "status": "ok",
                 "error": None, "slow": False, "suspect": False, "why": None}
            )  # fmt: skip
        for r, rnd in enumerate(tournament(n)):
            for a, b in rnd:
                bad = slow in (a, b)
                fail = failed is not None and {a, b} == set(failed)
                pairs.append(
                    {"fleet_id": FLEET_ID, "link": link, "kind": "inter", "round": r,
                     "node_a": node_id(a), "node_b": node_id(b), "world_size": 2,
                     "backend": "gloo", "msg_bytes": 1 << 24, "time_s": 0.3,
                     "busbw_gbps": None if fail else (0.012 if bad else 0.048),
                     "status": "failed" if fail else "ok",
                     "error": "RuntimeError: gloo timeout" if fail else None,
                     "slow": bad and not fail, "suspect": False, "why": None}
                )  # fmt: skip
            rounds.append({"fleet_id": FLEET_ID, "link": link, "kind": "inter", "round": r,
                           "n_pairs": len(rnd), "wall_s": 1.0 + r})  # fmt: skip
        rounds.append({"fleet_id": FLEET_ID, "link": link, "kind": "intra", "round": 0,
                       "n_pairs": n, "wall_s": 2.0})  # fmt: skip
    rounds.append({"fleet_id": FLEET_ID, "link": None, "kind": "compute", "round": 0,
                   "n_pairs": n, "wall_s": 20.0})  # fmt: skip
    suspects = (
        [
            {
                "fleet_id": FLEET_ID,
                "kind": "node",
                "node_id": node_id(slow),
                "ip": f"198.18.0.{slow + 1}",
                "hostname": f"node{slow}",
                "partner_id": None,
                "partner_ip": None,
                "link": None,
                "why": SLOW_WHY,
            }
        ]  # fmt: skip
        if slow is not None
        else []
    )
    check = {
        "fleet_id": FLEET_ID, "status": "ok", "ray_address": "198.18.0.1:6379",
        "driver_host": "node0", "git_sha": "0123456789abcdef", "git_dirty": False,
        "versions": {"torch": "2.5.1", "ray": "2.40.0"}, "sweep_file": None,
        "links": [{"name": ln, "env": {}} for ln in links], "pairs_mode": "all",
        "max_mb": 16.0, "rule": {"rel_bound": 0.7, "mad_k": 3.0, "min_partners": 2},
        "n_nodes": n, "n_rounds": len(tournament(n)), "skipped_nodes": [], "wall_s": 42.5,
        "n_suspects": len(suspects),
        "notes": ["link default: 1 pair failed, not judged"] if failed else [], "error": None,
    }  # fmt: skip
    return {"check": check, "nodes": nodes, "pairs": pairs, "rounds": rounds, "suspects": suspects}


def _matrix(text: str) -> dict[str, list[str]]:
    """Row label -> its cells, from heatmap_text's lines between the header and the legend."""
    lines = text.splitlines()[2:-1]
    out = {}
    for line in lines:
        parts = line.split()
        if parts[0] == "!":
            parts = parts[1:]
        out[parts[0]] = parts[1:]
    return out


# --- labels -----------------------------------------------------------------------------------


def test_labels_are_ips_when_the_ips_differ():
    nodes = fleet()["nodes"]
    assert list(node_labels(nodes).values()) == [f"198.18.0.{k}" for k in (1, 2, 3, 4)]
    assert node_label(nodes[1], nodes) == "198.18.0.2"


def test_labels_fall_back_to_hostnames_then_node_id_prefixes():
    nodes = [
        {"node_id": "aaaa1111" + "0" * 48, "ip": "127.0.0.1", "hostname": "h1"},
        {"node_id": "bbbb2222" + "0" * 48, "ip": "127.0.0.1", "hostname": "h2"},
    ]
    assert list(node_labels(nodes).values()) == ["h1", "h2"]
    anon = [{"node_id": "aaaa1111" + "0" * 48}, {"node_id": "bbbb2222" + "0" * 48}]
    assert list(node_labels(anon).values()) == ["aaaa1111", "bbbb2222"]
    assert node_label(anon[0]) == "aaaa1111"


def test_labels_stay_unique_when_nodes_share_an_ip():
    """Ray's local clusters put every node on one IP and host: the id prefix tells them apart,
    long enough to differ even when the first 8 characters are the same."""
    nodes = [
        {"node_id": "abcdef12" + "0" * 48, "ip": "127.0.0.1", "hostname": "box"},
        {"node_id": "abcdef12" + "9" * 48, "ip": "127.0.0.1", "hostname": "box"},
        {"node_id": "12345678" + "0" * 48, "ip": "10.0.0.9", "hostname": "box"},
    ]
    labels = node_labels(nodes)
    assert len(set(labels.values())) == 3
    assert labels[nodes[0]["node_id"]] == "127.0.0.1/abcdef120"
    assert labels[nodes[1]["node_id"]] == "127.0.0.1/abcdef129"
    assert labels[nodes[2]["node_id"]] == "10.0.0.9"


# --- the matrix -------------------------------------------------------------------------------


def test_heatmap_marks_the_slow_nodes_row_and_column_and_shows_the_diagonal():
    f = fleet(4, slow=2)
    text = heatmap_text(f["nodes"], f["pairs"], "default")
    m = _matrix(text)
    ips = [f"198.18.0.{k}" for k in (1, 2, 3, 4)]
    assert list(m) == ips
    assert text.splitlines()[1].split() == ips  # labels head the columns of a small fleet
    for k, ip in enumerate(ips):
        row = m[ip]
        assert row[k] == "[0.500]"  # the diagonal: intra-node busbw, in brackets
        for j, cell in enumerate(row):
            if j == k:
                continue
            expected = "0.0120*" if 2 in (j, k) else "0.0480"
            assert cell == expected, (ip, j, cell)
    suspect_lines = [ln for ln in text.splitlines() if ln.startswith("!")]
    assert [ln.split()[1] for ln in suspect_lines] == ["198.18.0.3"]
    assert "legend:" in text.splitlines()[-1]


def test_heatmap_shows_failed_and_unmeasured_cells():
    f = fleet(4, slow=None, failed=(0, 3))
    pairs = [p for p in f["pairs"] if {p["node_a"], p["node_b"]} != {node_id(1), node_id(2)}]
    m = _matrix(heatmap_text(f["nodes"], pairs, "default"))
    assert m["198.18.0.1"][3] == "FAIL" and m["198.18.0.4"][0] == "FAIL"
    assert m["198.18.0.2"][2] == "-" and m["198.18.0.3"][1] == "-"
    assert not any("*" in c for row in m.values() for c in row)


def test_heatmap_of_a_large_fleet_numbers_its_columns():
    f = fleet(9, slow=None)
    lines = heatmap_text(f["nodes"], f["pairs"], "default").splitlines()
    assert lines[1].split() == [str(k) for k in range(1, 10)]
    assert lines[2].split()[:3] == ["1", "198.18.0.1", "[0.500]"]


def test_one_matrix_per_link():
    f = fleet(3, slow=None, links=("eth", "ib"))
    text = summary_text(**f)
    assert [ln.split(":")[0] for ln in text.splitlines() if ln.startswith("link ")] == [
        "link eth",
        "link ib",
    ]


# --- suspects and summary ---------------------------------------------------------------------


def test_suspects_text_names_nodes_and_pairs_with_why():
    f = fleet(4, slow=1)
    pair = {"kind": "pair", "node_id": node_id(0), "ip": "198.18.0.1", "hostname": "node0",
            "partner_id": node_id(3), "partner_ip": "198.18.0.4", "link": "default",
            "why": "pair 0.010 GB/s vs fleet median 0.048"}  # fmt: skip
    text = suspects_text([*f["suspects"], pair], f["nodes"])
    node_line, pair_line = text.splitlines()
    assert node_line.startswith("node 198.18.0.2 (ip 198.18.0.2, host node1, id 01010101)")
    assert node_line.endswith(SLOW_WHY)
    assert pair_line == (
        "pair 198.18.0.1 <-> 198.18.0.4 on link default: pair 0.010 GB/s vs fleet median 0.048"
    )
    assert suspects_text([], f["nodes"]) == "no suspect"


def test_round_times_take_the_inter_rounds_only():
    rt = round_times(fleet(4)["rounds"])  # inter rounds 1, 2, 3 s; intra 2 s; compute 20 s
    assert (rt["n"], rt["median_s"], rt["max_s"]) == (3, 2.0, 3.0)
    assert rt["stages_s"] == {"inter": 6.0, "intra": 2.0, "compute": 20.0}
    assert round_times([])["median_s"] is None


def test_summary_has_the_header_figures_nodes_matrix_and_what_to_do():
    f = fleet(4, slow=2, failed=(0, 1))
    text = summary_text(**f)
    assert text.splitlines()[0] == f"fleet check {FLEET_ID}"
    assert "per inter-node round: median 2.00 s, max 3.00 s over 3 round(s)" in text
    assert "wall time: 42.5 s" in text
    assert "message size: 16 MiB (--max-mb 16)" in text
    assert "pairs: all" in text
    node3 = next(ln for ln in text.splitlines() if ln.startswith("198.18.0.3 "))
    assert re.search(r"\bSUSPECT\b", node3) and SLOW_WHY in node3 and "[" not in node3
    assert "link default: 1 pair failed, not judged" in text
    assert f"exclude them: linksweep run SWEEP.yaml --exclude-suspects {FLEET_ID}" in text


def test_summary_without_suspects_says_so():
    text = summary_text(**fleet(4, slow=None))
    assert "Suspects (0)\n  no suspect\n  nothing to exclude" in text
    assert "--exclude-suspects" not in text


def test_summary_reads_json_cells_left_as_text():
    import json

    f = fleet(2, slow=None)
    check = dict(f["check"], links=json.dumps(f["check"]["links"]), notes='["a note"]')
    text = summary_text(**dict(f, check=check))
    assert "links: default" in text and "  - a note" in text


def test_a_check_that_stopped_has_no_verdict():
    f = fleet(2, slow=None)
    check = dict(f["check"], status="failed", error="ValueError: boom")
    nodes = [dict(n, suspect=None) for n in f["nodes"]]
    text = summary_text(**dict(f, check=check, nodes=nodes))
    assert "no verdict: the check ended failed" in text and "nothing to exclude" not in text
    assert "error: ValueError: boom" in text
    node_line = next(ln for ln in text.splitlines() if ln.startswith("198.18.0.1 "))
    assert "ok" not in node_line.split()


def test_stored_texts_name_nodes_by_label_when_read():
    from orchestrator.fleet.summary import labelled

    a, b = "ab" * 28, "cd" * 28
    labels = {a: "10.0.0.1", b: "10.0.0.2"}
    text = f"a single slow pair: {a} and {b} are fine with their other partners"
    assert labelled(text, labels) == (
        "a single slow pair: 10.0.0.1 and 10.0.0.2 are fine with their other partners"
    )
    assert labelled("no node here", labels) == "no node here"


def test_the_header_says_the_rule_the_check_was_judged_by():
    from orchestrator.fleet.summary import rule_text
    from orchestrator.fleet.suspects import default_rule

    cpu = rule_text(default_rule(gpu_fleet=False).to_dict())
    assert cpu == (
        "low when 50% below the median and 3 scaled MADs, or under 25% of it; "
        "a node slow with 2+ partners"
    )
    assert rule_text(json.loads(json.dumps(default_rule(True).to_dict()))).startswith(
        "low when 15% below"
    )
    assert rule_text(None) == "-" and rule_text({"x": 1}) == "-"
    f = fleet(4, slow=2)
    f["check"]["rule"] = json.dumps(default_rule(False).to_dict())
    assert f"rule: {cpu}" in summary_text(**f)


def test_a_mixed_fleet_shows_each_nodes_group_and_the_rule_of_each_kind():
    from orchestrator.fleet.summary import node_rows, rule_text
    from orchestrator.fleet.suspects import default_rule

    f = fleet(4, slow=None)
    keys = ["gpu:NVIDIA A100-SXM4-40GB"] * 2 + ["gpu:NVIDIA A10G", "cpu"]
    for n, key in zip(f["nodes"], keys, strict=True):
        n["health"] = {"idle": None, "under_load": None, "group": key}
    f["nodes"][3]["health"] = json.dumps(f["nodes"][3]["health"])  # a JSON cell left as text
    cols, rows = node_rows(f["nodes"], f["pairs"], ["default"])
    assert cols[3:6] == ["gpus", "group", "tokens/s"]
    assert [r[4] for r in rows] == keys
    by_kind = {"cpu": default_rule(False).to_dict(), "gpu": default_rule(True).to_dict()}
    f["check"]["rule"] = {**by_kind["gpu"], "by_kind": by_kind}
    text = summary_text(**f)
    assert "groups (judged apart): gpu:NVIDIA A100-SXM4-40GB (2), gpu:NVIDIA A10G (1), cpu (1)" in (
        text
    )
    assert "rule: CPU nodes: low when 50% below" in text and "| GPU nodes: low when 15%" in text
    one_kind = {**by_kind["gpu"], "by_kind": {"gpu": by_kind["gpu"]}}
    assert rule_text(one_kind) == rule_text(by_kind["gpu"])
    # a check stored before groups: no group column, no groups line
    old = fleet(4, slow=None)
    assert "group" not in node_rows(old["nodes"], old["pairs"], ["default"])[0]
    assert "groups (judged apart)" not in summary_text(**old)
