"""The report's first screen: the headline, the caveats box and the links, described.

``headline_html`` renders ``orchestrator.analysis.headline.build_headline`` (sentences per link plus the
compact strategy x grad_accum table); ``caveats_html`` is the amber box a CPU/gloo or emulated
sweep gets, saying what its numbers do and do not show; ``links_html`` lists each link with its
physical description, rated rate and measured busbw as a share of it (view ``link_overview``),
and flags every GPU whose PCIe link trained below its maximum width; ``throttling``
says "not checked" wherever GPU telemetry is absent, in every place the report mentions it;
``rehearsal_html`` is the box a sweep with one-GPU rehearsal runs gets: a rehearsal of the NCCL
path, never shown as a link measurement. Pure string functions.

May import: reading, markup, orchestrator.analysis.headline, orchestrator.analysis.links, orchestrator.analysis.rated,
orchestrator.analysis.stats.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.analysis.headline import Headline, build_headline, extra_vs_predicted
from orchestrator.analysis.links import fmt_gbps, link_label, share_text
from orchestrator.analysis.rated import idle_gen_text, pcie_training
from orchestrator.analysis.stats import (
    INTERVAL_BOOTSTRAP,
    INTERVAL_LABELS,
    MIN_RUNS_FOR_CI,
    rehearsal,
)
from orchestrator.report.markup import esc

if TYPE_CHECKING:
    from orchestrator.report.reading import ReportData


def overview_by_link(data: ReportData) -> dict[str, dict]:
    """view ``link_overview`` by link; a sweep stored before it (no link_descriptions) still gets
    each link's measured busbw, from the microbenchmark rows."""
    out = {o["link"]: o for o in data.link_overview}
    described = set(out)
    for r in sorted(data.bandwidth, key=lambda r: r.get("msg_bytes") or 0):  # largest last
        if r.get("collective") == "all_reduce" and r["link"] not in described:
            out[r["link"]] = {"link": r["link"], "measured_busbw_gbps": r.get("busbw_gbps")}
    return out


def labelled(data: ReportData, link: str | None) -> str:
    """A link's name with its rated rate and measured busbw, where the sweep recorded them."""
    return link_label(str(link), overview_by_link(data).get(link))


def headline(data: ReportData) -> Headline:
    return build_headline(
        data.sensitivity, data.variants, data.link_overview, list(data.link_order)
    )


def headline_html(data: ReportData) -> str:
    h = headline(data)
    if h.empty and any(rehearsal(r) for r in data.runs):
        return (
            "<div class='headline'><b>No link finding:</b> this sweep's runs are a one-GPU "
            "rehearsal of the NCCL path (two ranks on one GPU), which measures no link; see the "
            "box below.</div>"
        )
    if h.empty:
        return (
            "<div class='headline'><b>No finding yet:</b> the headline compares links, and this "
            "sweep has no slowdown (one link only, or no variant with ok runs on both a link "
            "and the baseline link).</div>"
        )
    parts = ["<div class='headline'><h2 id='headline'>What this sweep found</h2>"]
    for lh in h.links:
        parts.append("".join(f"<p>{esc(s)}</p>" for s in lh.sentences))
        head = "".join(f"<th>grad_accum {ga}</th>" for ga in lh.grad_accums)
        trs = []
        for series, per in lh.cells.items():
            tds = []
            for ga in lh.grad_accums:
                c = per.get(ga)
                cls = "num" + (" slower" if c is not None and c.beyond_spread else "")
                tds.append(f"<td class='{cls}'>{esc(c.text() if c else '–')}</td>")
            trs.append(f"<tr><td>{esc(series)}</td>{''.join(tds)}</tr>")
        parts.append(
            f"<table class='classic'><caption>slowdown = time per step on {esc(lh.link)} ÷ on "
            f"{esc(lh.baseline)}, [{esc(lh.interval_label)}]</caption><thead><tr><th>strategy"
            f"</th>{head}</tr></thead><tbody>{''.join(trs)}</tbody></table>"
        )
    parts += [f"<p class='note'>{esc(n)}</p>" for n in h.notes]
    parts.append("</div>")
    return "".join(parts)


def interval_words(rows: list[dict]) -> str:
    """What the brackets in a set of variant or slowdown rows are."""
    kinds = sorted({r.get("interval_kind") for r in rows if r.get("interval_kind")})
    return " or ".join(INTERVAL_LABELS.get(k, k) for k in kinds) or "interval"


def interval_note() -> str:
    return (
        f"Brackets: with fewer than {MIN_RUNS_FOR_CI} ok runs per variant, the range of the runs "
        "(min–max; for a ratio, the smallest and largest ratio of any run pair): it shows "
        f"spread, not confidence. From {MIN_RUNS_FOR_CI} runs on, the "
        f"{INTERVAL_LABELS[INTERVAL_BOOTSTRAP]} (percentile bootstrap of the median, 2000 "
        "resamples, fixed seed). Column interval_kind says which."
    )


def is_emulated_or_cpu(data: ReportData) -> tuple[bool, bool]:
    """(runs on CPU with gloo, links are the emulated cluster's)."""
    cpu = any(r.get("backend") == "gloo" for r in data.runs) or (not data.gpus and bool(data.runs))
    emulated = any(o.get("kind") == "emulated" for o in data.link_overview) or any(
        "GLOO_SOCKET_IFNAME" in (env or {}) for env in (data.spec.get("links") or {}).values()
    )
    return cpu, emulated


def caveats_html(data: ReportData) -> str:
    cpu, emulated = is_emulated_or_cpu(data)
    if not cpu and not emulated:
        return ""
    model = data.spec.get("model", "the model")
    where = (
        "separate network namespaces (one per emulated node) joined by veth links shaped with tc"
        if emulated
        else "one machine, where every link variant is the same loopback, so link differences "
        "are noise"
    )
    return (
        "<div class='caveat'><b>What these numbers are, and are not.</b> "
        f"This sweep ran {esc(model)} on CPU processes talking over gloo (TCP), placed on "
        f"{esc(where)}. <b>They show</b> how much traffic each strategy sends per optimizer step "
        "and how a slower link turns that traffic into step time, and how grad_accum changes "
        "both. <b>They do not show</b> GPU step times, NVLink/PCIe/InfiniBand speeds or NCCL's "
        "behaviour: CPU compute is far slower than a GPU's, so the link's share of each step "
        "(and with it every slowdown) will differ on real hardware. Run the same sweep file on "
        "GPUs for those numbers. Throttling: "
        f"{esc(throttling(data.runs))}.</div>"
    )


def throttling(runs: list[dict]) -> str:
    """One consistent phrase: "not checked (no GPU telemetry)", or what the telemetry found."""
    absent = [r for r in runs if str(r.get("telemetry") or "absent").startswith("absent")]
    if runs and len(absent) == len(runs):
        return "not checked (no GPU telemetry)"
    n = sum(1 for r in runs if r.get("throttled"))
    checked = len(runs) - len(absent)
    text = f"{n} of {checked} checked run(s) throttled"
    if absent:
        text += f"; not checked on {len(absent)} run(s) without GPU telemetry"
    return text


def links_html(data: ReportData) -> str:
    """Each link: what it physically is, its rated rate, the busbw measured on it."""
    env_of = data.spec.get("links") or {}
    ov = overview_by_link(data)
    names = [x for x in data.link_order if x in env_of] + [
        x for x in env_of if x not in data.link_order
    ]
    if not names:
        return ""
    trs = []
    for name in names:
        o = ov.get(name, {})
        env = " ".join(f"{k}={v}" for k, v in (env_of.get(name) or {}).items()) or "(no env)"
        rated = rated_words(o)
        measured = (
            f"{fmt_gbps(o['measured_busbw_gbps'])} GB/s"
            if o.get("measured_busbw_gbps") is not None
            else "not measured"
        )
        if share_text(o):
            measured += f" = {share_text(o)}"
        seen = ", ".join(x for x in (o.get("link_classes"), o.get("transports")) if x) or "–"
        base = " (baseline)" if name == data.baseline_link else ""
        trs.append(
            f"<tr><td><b>{esc(name)}</b>{esc(base)}</td><td>{esc(o.get('description') or '–')}"
            f"</td><td><code>{esc(env)}</code></td><td class='num'>{esc(rated)}</td>"
            f"<td class='num'>{esc(measured)}</td><td>{esc(seen)}</td></tr>"
        )
    return (
        "<div class='scroll'><table><thead><tr><th>link</th><th>what it is</th><th>env</th>"
        "<th>rated rate</th><th>measured busbw (all_reduce, largest message)</th>"
        "<th>topology class, transport seen</th></tr></thead><tbody>"
        + "".join(trs)
        + "</tbody></table></div>"
        + pcie_training_html(data.gpus)
    )


def rated_words(o: dict) -> str:
    """The rated-rate cell: ``500mbit = 0.0625 GB/s``, ``NVLink 300 GB/s``, ``PCIe 31.5 GB/s``,
    ``unshaped`` or ``not known`` (the description says why)."""
    gbps = o.get("rated_gbps")
    if o.get("rate") and gbps:
        return f"{o['rate']} = {fmt_gbps(gbps)} GB/s"
    if gbps and o.get("rated_source") in ("nvlink", "pcie"):
        return f"{'NVLink' if o['rated_source'] == 'nvlink' else 'PCIe'} {fmt_gbps(gbps)} GB/s"
    return "unshaped" if o.get("kind") == "emulated" else "not known (see what it is)"


def pcie_training_html(gpus: list[dict]) -> str:
    """A caveat for GPUs whose PCIe link trained on fewer lanes than it can (a fault: PCIe and
    SHM results from them are capped), and a note for a generation below maximum at idle."""
    faults, notes = [], []
    for g in gpus:
        fault, note = pcie_training(g)
        faults += [fault] if fault else []
        notes += [note] if note else []
    out = ""
    if faults:
        out += (
            "<div class='caveat'><b>PCIe trained below its maximum width.</b> "
            + "; ".join(esc(f) for f in faults)
            + ". PCIe and SHM transfers from these GPUs get at most that share of the link.</div>"
        )
    if notes:
        out += f"<p class='note'>{esc(idle_gen_text(notes))}.</p>"
    return out


def extra_rows(data: ReportData) -> list[dict]:
    return extra_vs_predicted(data.variants, data.baseline_link, data.runs)


def rehearsal_html(data: ReportData) -> str:
    """The box a sweep with one-GPU rehearsal runs gets (``stats.rehearsal``): what they check,
    and that their step times are no link measurement (left out of every link figure)."""
    n = sum(1 for r in data.runs if rehearsal(r))
    if not n:
        return ""
    return (
        "<div class='caveat'><b>A rehearsal of the NCCL path, not a link measurement.</b> "
        f"{n} of {len(data.runs)} run(s) placed two ranks on one GPU (<code>ranks_per_gpu: 2"
        "</code>, link class <code>shared-gpu</code>), each rank with its own NCCL_HOSTID so "
        "NCCL treats them as two hosts. <b>They show</b> that NCCL initialises, picks its "
        "transports and runs the strategy's collectives, and that telemetry and the NCCL log "
        "are read, all on one GPU. <b>They do not show</b> any link's speed: both ranks share "
        "one device and its memory, whatever the link's env. Their step times are shown per "
        "variant as measured, and left out of slowdowns, the link model, the measured vs "
        "predicted comparison and the headline.</div>"
    )
