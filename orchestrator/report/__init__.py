"""What a sweep found, readable offline: the report (run by ``commands/report.py``) and the
export (``commands/export.py``).

``linksweep report [--db PATH] [--sweep ID] [--out DIR]`` reads one sweep
(the latest by start time unless ``--sweep`` names one) and writes into ``DIR``:

- ``report.html``: self-contained. Inline CSS, figures embedded as base64 PNG data URIs, no
  scripts, no fonts, no links to anything outside the file, so it opens on an air-gapped machine
  and can be attached to an issue as one file. Sections: the classic table (time per step on
  each link, and each link's ratio to the baseline, per strategy), the figures, the variant
  summary, the link sensitivity, the runs needing attention (failed, throttled, link mismatch,
  microbenchmark ops that did not run ok), all runs, provenance (sweep, versions, spec, what the
  runs actually used, topology, GPUs).
- the figures as separate PNGs (``FIGURES``), for slides and issues:
  ``slowdown_vs_grad_accum.png`` (link slowdown with its bootstrap interval, per strategy),
  ``step_time_distributions.png`` (timed step times per variant),
  ``bytes_per_step.png`` (measured vs analytic collective bytes per optimizer step),
  ``busbw_vs_msg_size.png`` (link microbenchmark, nccl-tests bus bandwidth).

A figure that has no data to draw (a sweep whose runs all failed, one link only so no slowdown,
no link microbenchmark) is not written, and the HTML says what is missing and why; a PNG left in
``DIR`` by an earlier report is removed so the folder never mixes two sweeps. Step times and
slowdowns count only runs that finished ok and were not throttled (``orchestrator.analysis.stats.included``;
bytes per step take every ok run, since throttling does not change bytes); failed and throttled
runs are listed, and counted as excluded. Slowdowns, the link model and the measured vs
predicted comparison also leave out the one-GPU rehearsal (``ranks_per_gpu: 2``, link class
``shared-gpu``: ``orchestrator.analysis.stats.link_measurement``), which the report labels as a rehearsal
of the NCCL path, never as a link measurement.

``linksweep export OUTDIR [--format parquet|csv] [--db PATH]`` writes every
table and view of the database to ``OUTDIR``, one file each (``orchestrator.store.export_all``).

Exit codes (``orchestrator/errors.py``): 0 written (also for a sweep with nothing to plot);
2 when the database or the sweep does not exist or cannot be read, or the output folder cannot
be written. Messages go to stderr as ``linksweep: ...``.

Figures are drawn on ``matplotlib.figure.Figure`` with the Agg canvas, never pyplot: no global
state, no display. No SQL in this package: ``reading`` reads through ``orchestrator.store.Reader``
(read-only) and the named queries of ``orchestrator/store/queries.py``.

One module per job:
    fmt             number, size and time formatting; pure.
    labels          variant labels and ordering shared by figures and tables; pure.
    reading         ``ReportData``, ``pick_sweep``, ``load_report_data``: the only reading I/O.
    draw            matplotlib style and axis helpers.
    plots           rows -> ``Figure`` and caption, or the reason it is not drawn.
    figures         ``build_figures`` -> PNG bytes (a figure that fails becomes a note).
    markup          HTML building blocks: escaping, tables of rows, the "missing" box.
    sections        the report's sections: the classic link table, the runs needing
                    attention, provenance.
    findings        the first screen: the headline, the caveats box, the links described.
    predicted       measured vs predicted: does the link's bandwidth explain the slowdown.
    accumulation    the runs that failed the accumulation check, in words; pure (the "Read
                    with care" box, the runs needing attention, ``linksweep run``'s summary).
    phases          where a run's seconds go, phase by phase.
    timeline        one traced step per variant and link, a lane per rank.
    linkmodel_view  the link model's figure and section.
    wait_view       waiting for peers vs moving bytes in the traced steps; the straggler.
    nccltests_view  nccl-tests beside linksweep's busbw.
    baseline_view   the "Compared with baseline" section and ``compared_with_baseline.png``
                    (``linksweep report --baseline NAME``), from
                    ``orchestrator.compare.comparison``'s JSON (``docs/compare.md``).
    fleet_view      a fleet check's ``fleet.html`` and its heatmaps.
    html            ``render_html``: rows and PNG bytes -> the page.

Units follow the schema's names: ``_s`` seconds, ``_bytes`` bytes, ``_gbps`` GB/s with
1 GB = 1e9 B. Message sizes in the microbenchmark are powers of two and are labelled in KiB/MiB.

May import: reading, figures, fmt, html, plots.
"""

from orchestrator.report.figures import FIGURES, FigureResult, build_figures
from orchestrator.report.fmt import (
    fmt_bytes,
    fmt_msg_size,
    fmt_seconds,
    fmt_time_ci,
    fmt_value,
    sig3,
)
from orchestrator.report.html import render_html
from orchestrator.report.plots import (
    plot_busbw,
    plot_bytes_per_step,
    plot_slowdown,
    plot_step_times,
)
from orchestrator.report.reading import ReportData, ReportError, load_report_data, pick_sweep

__all__ = [
    "FIGURES",
    "FigureResult",
    "ReportData",
    "ReportError",
    "build_figures",
    "fmt_bytes",
    "fmt_msg_size",
    "fmt_seconds",
    "fmt_time_ci",
    "fmt_value",
    "load_report_data",
    "pick_sweep",
    "plot_busbw",
    "plot_bytes_per_step",
    "plot_slowdown",
    "plot_step_times",
    "render_html",
    "sig3",
]
