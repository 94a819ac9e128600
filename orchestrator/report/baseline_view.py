"""The report's "Compared with baseline" section (``linksweep report --baseline NAME``): one
figure, each variant's ratio of median step times (this sweep / the baseline) with its interval
and the threshold band drawn, and the table of variants and slowdowns with their verdicts.

Pure apart from matplotlib (imported inside the function). Input: the JSON rows of
``orchestrator.compare.comparison.comparison_json``.

May import: draw, labels, markup, matplotlib.
"""

from __future__ import annotations

import base64
from typing import Any

from orchestrator.report.draw import RC, figure_png, new_figure
from orchestrator.report.labels import variant_label, varying
from orchestrator.report.markup import esc, html_table, missing

FIGURE = "compared_with_baseline.png"
VERDICT_COLORS = {"slower": "#c53030", "faster": "#2f855a", "no change": "#4a5568"}
NO_MATCH = "No variant of this sweep matches one of the baseline with runs on both sides."


def _vary(rows: list[dict]) -> set[str]:
    """The key columns that vary among the rows' variants (``stats.varying``)."""
    return varying([r["key"] for r in rows])


def plot_baseline_ratios(doc: dict[str, Any]) -> tuple[Any | None, str]:
    """Ratio (this sweep / baseline) per matched variant, its interval as a bar, the band
    1 ± threshold shaded: a point outside the band whose verdict is slower/faster is a change."""
    rows = [r for r in doc["variants"] if r.get("ratio") is not None]
    if not rows:
        return None, NO_MATCH
    import matplotlib

    t = float(doc["threshold"])
    vary = _vary(rows)
    with matplotlib.rc_context(RC):
        fig = new_figure(7.5, 1.2 + 0.36 * len(rows))
        ax = fig.add_subplot(1, 1, 1)
        ax.axvspan(1 - t, 1 + t, color="#e3e6eb", zorder=0, label=f"±{t * 100:g}% threshold")
        ax.axvline(1.0, color="0.35", linewidth=1.0, zorder=1)
        for i, r in enumerate(rows):
            color = VERDICT_COLORS.get(r["verdict"], "#7f7f7f")
            ax.errorbar(
                r["ratio"],
                i,
                xerr=[[r["ratio"] - r["ratio_low"]], [r["ratio_high"] - r["ratio"]]],
                fmt="o",
                color=color,
                capsize=3,
                zorder=3,
            )
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([variant_label(r["key"], vary) for r in rows])
        ax.invert_yaxis()
        ax.set_xlabel("median step time: this sweep ÷ baseline (interval: range or 95% bootstrap)")
        ax.grid(True, axis="x", alpha=0.3)
        for verdict, color in VERDICT_COLORS.items():
            ax.scatter([], [], color=color, label=verdict)
        ax.legend(loc="best", frameon=False, fontsize=8.5)
    note = (
        f"Each point: this sweep's median step time ÷ the baseline's ({doc['baseline']['sweep_id']})"
        f", same variant; bars: the interval; grey band: ±{t * 100:g}% threshold. Red: slower "
        "beyond the threshold and the noise; green: faster."
    )
    return fig, note


COLUMNS = ("figure", "variant", "baseline", "candidate", "ratio", "ratio_low", "ratio_high",
           "n", "test", "p_value", "verdict")  # fmt: skip


def baseline_html(name: str, doc: dict[str, Any], figure_html: str) -> str:
    """The section: a verdict line, what differs in the environment, the figure, the table."""
    if doc.get("error"):
        return missing(doc["error"])
    rows = [*doc["variants"], *doc["slowdowns"]]
    vary = _vary(rows)
    table = [
        {"figure": r["figure"], "variant": variant_label(r["key"], vary),
         "baseline": r["baseline_median_s"], "candidate": r["candidate_median_s"],
         "ratio": r["ratio"], "ratio_low": r["ratio_low"], "ratio_high": r["ratio_high"],
         "n": f"{r['n_baseline']}/{r['n_candidate']}", "test": r["test"],
         "p_value": r["p_value"], "verdict": r["verdict"]}
        for r in rows
    ]  # fmt: skip
    n = doc["regressions"]
    t = f"{doc['threshold'] * 100:g}%"
    box = "warn" if n else "ok"
    verdict = (
        f"{n} regression(s) beyond {t} and the noise against baseline {name} "
        f"(sweep {doc['baseline']['sweep_id']})"
        if n
        else f"No regression beyond {t} against baseline {name} (sweep "
        f"{doc['baseline']['sweep_id']})"
    )
    parts = [f"<div class='{box}'>{esc(verdict)}.</div>"]
    if doc.get("workload_mismatch"):
        fields = ", ".join(w["field"] for w in doc["workload_mismatch"])
        parts.append(missing(f"The workloads differ ({fields}): step times are not comparable."))
    if doc["fingerprint"]:
        parts.append("<h3>What differs (fingerprint)</h3>" + html_table(doc["fingerprint"]))
    parts.append(figure_html)
    parts.append(html_table(table, COLUMNS) if table else missing(NO_MATCH))
    only = doc["unmatched"]
    if only["baseline_only"] or only["candidate_only"]:
        parts.append(
            f"<p class='note'>Unmatched variants: {len(only['baseline_only'])} only in the "
            f"baseline, {len(only['candidate_only'])} only in this sweep "
            "(<code>linksweep compare --format json</code> lists them).</p>"
        )
    return "".join(parts)


def baseline_section(name: str, doc: dict[str, Any]) -> tuple[str, bytes | None]:
    """(the section's HTML, the figure's PNG or None when there is nothing to draw)."""
    fig, note = plot_baseline_ratios(doc) if not doc.get("error") else (None, doc["error"])
    png = figure_png(fig) if fig is not None else None
    if png is None:
        figure_html = missing(note)
    else:
        b64 = base64.b64encode(png).decode("ascii")
        figure_html = (
            f"<figure><img alt='compared with baseline' src='data:image/png;base64,{b64}'>"
            f"<figcaption>{esc(note)} <code>{FIGURE}</code></figcaption></figure>"
        )
    return baseline_html(name, doc, figure_html), png
