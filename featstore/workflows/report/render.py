"""Render a ReportData as one self-contained HTML file (PNG plots embedded as data URIs, no
network needed) and a Markdown twin whose images sit in `<name>_files/`."""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from featstore.errors import InputError
from featstore.store.fileio import atomic_write_output
from featstore.store.formatting import (
    TARGET_TITLE,
    cell_number,
    compact,
    mean_interval,
    number,
    setting_text,
)
from featstore.store.sanity import report_lines
from featstore.store.textsafe import html_text, md_text
from featstore.workflows.report import plots
from featstore.workflows.report.collect import ReportData
from featstore.workflows.report.leaderboard import (
    leaderboard,
    ranked,
    rows_line,
    summary_line,
)
from featstore.workflows.report.statistics import (
    cd_figures,
    p_value_tables,
    ranking_tables,
    statistics_notes,
)


@dataclass
class Figure:
    section: str
    caption: str
    png: bytes
    slug: str


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    best: set[tuple[int, int]]          # (row, column) cells to highlight
    table_id: str = ""                  # the HTML id (default: leaderboard / table<i>)


def _best_cells(rows: list[list[Any]], columns: dict[int, Any]) -> set[tuple[int, int]]:
    best = set()
    for col, fn in columns.items():
        values = [r[col] for r in rows if isinstance(r[col], float) and not math.isnan(r[col])]
        if values:
            target = fn(values)
            best |= {(i, col) for i, r in enumerate(rows) if r[col] == target}
    return best


def leaderboard_tables(data: ReportData, rank_by: str = "mean") -> list[Table]:
    """The ranked leaderboard (`leaderboard.leaderboard`), the per-split table in the same
    order, settings and timings, then the statistics that can say something here."""
    res = data.result
    order = ranked(res, rank_by)
    header, rows, best = leaderboard(res, rank_by)
    title = "Leaderboard (tuned on val)" if res.get("tuned") else "Leaderboard"
    title += (f": group means (the unweighted mean of each group's splits' metrics, not "
              f"the pooled splits) vs {res.get('id_split', 'id/test')}, ranked by "
              f"{header[2].replace('↑', '')}; FPR95 = FPR at 95% TPR, ID positive; %")
    ci = res.get("ci")
    if ci:
        title += (f"; ±h = half the width of the {100 * ci['level']:g}% {ci['method']} "
                  f"interval (stratified bootstrap, {ci['resamples']} resamples, seed "
                  f"{ci['seed']})")
    group_table = Table(title, header, rows, best, "leaderboard")
    splits = res["ood_splits"]
    split_raw = [[res["methods"][m]["splits"][s][k] for s in splits for k in ("auroc", "fpr95")]
                 for m in order]
    split_rows = [[m] + [compact(res["methods"][m]["splits"][s][k],
                                 res["methods"][m]["splits"][s].get(f"{k}_ci"))
                         for s in splits for k in ("auroc", "fpr95")] for m in order]
    split_best = {(i, j + 1) for i, j in _best_cells(
        split_raw, {c: (max if c % 2 == 0 else min) for c in range(2 * len(splits))})}
    split_table = Table("Per split: AUROC↑ / FPR95↓", ["scorer"] + [
        f"{s.removeprefix('ood/')} {k}" for s in splits for k in ("AUROC", "FPR95")],
        split_rows, split_best, "per-split")
    settings = []
    for m in order:
        r = res["methods"][m]
        setting = r.get("chosen", r.get("params", {}))
        settings.append([m, setting_text(setting, "default"),
                         "from the score cache" if r.get("cached")
                         else f"{r.get('fit_seconds', 0.0) + r.get('score_seconds', 0.0):.2f}"])
    settings_table = Table("Settings and timings", ["scorer", "setting", "fit+score s"],
                           settings, set(), "settings")
    return [group_table, split_table, settings_table, *ranking_tables(data, Table),
            *p_value_tables(data, Table, order)]


def notes_tables(data: ReportData) -> list[Table]:
    """What the leaderboard does not show but must say: the scorers skipped on this store
    (with the reason) and the defaults clamped to it (`scorers.adapt`), each a table."""
    res = data.result
    out: list[Table] = []
    skipped = res.get("skipped") or {}
    if skipped:
        out.append(Table(f"Skipped: {len(skipped)} scorer{'s' if len(skipped) != 1 else ''} "
                         "could not run on this store", ["scorer", "reason"],
                         [[k, str(v)] for k, v in skipped.items()], set()))
    rows = []
    for name, r in res["methods"].items():
        for a in r.get("adjusted") or []:
            used = a.get("used")
            rows.append([name, setting_text(a["setting"]),
                         "dropped" if used is None else setting_text(used), a["reason"]])
    if rows:
        out.append(Table("Defaults adjusted to this store", ["scorer", "default", "used",
                                                             "reason"], rows, set()))
    return out


def _note_id(t: Table) -> str:
    return "skipped" if t.title.startswith("Skipped") else "adjusted"


#: scorers drawn in a split's main ROC/PR figure (the best by AUROC); every scorer's curves
#: follow in a second section when there are more
TOP_CURVES = 6


def _ranked_by_auroc(res: dict[str, Any], split: str, names: list[str]) -> list[str]:
    """`names` by the evaluation's AUROC on `split`, best first (ties by name)."""
    def auroc(name: str) -> float:
        value = res["methods"].get(name, {}).get("splits", {}).get(split, {}).get("auroc")
        return float("-inf") if value is None or value != value else float(value)

    return sorted(names, key=lambda m: (-auroc(m), m))


def _labelled(res: dict[str, Any], split: str, curves: dict[str, Any],
              names: list[str]) -> dict[str, Any]:
    """The curves of `names`, in that order, keyed by legend label `name  AUROC`."""
    out = {}
    for m in names:
        value = res["methods"].get(m, {}).get("splits", {}).get(split, {}).get("auroc")
        out[m if value is None else f"{m}  {value:.1f}"] = curves[m]
    return out


def figures(data: ReportData) -> list[Figure]:
    """Every plot of the report, in order."""
    out: list[Figure] = []
    res = data.result
    id_name = res.get("id_split", "id/test")
    if data.scores:
        every = {split: {m: plots.curve_points(s[id_name], s[split])
                         for m, s in data.scores.items()} for split in res["ood_splits"]}
        ranked = {split: _ranked_by_auroc(res, split, list(curves))
                  for split, curves in every.items()}
        n = len(data.scores)
        for split, curves in every.items():
            top = ranked[split][:TOP_CURVES]
            note = f"top {len(top)} of {n} scorers by AUROC" if n > TOP_CURVES else ""
            out.append(Figure("ROC and PR curves", split,
                              plots.roc_pr_figure(split, _labelled(res, split, curves, top),
                                                  note),
                              f"curves_{split.replace('/', '_')}"))
        if n > TOP_CURVES:
            for split, curves in every.items():
                out.append(Figure(f"ROC and PR curves, all {n} scorers", split,
                                  plots.roc_pr_figure(split, _labelled(res, split, curves,
                                                                       ranked[split]),
                                                      "all scorers"),
                                  f"curves_all_{split.replace('/', '_')}"))
        for method, s in data.scores.items():
            ood = {split: s[split] for split in res["ood_splits"]}
            out.append(Figure("Score histograms", method,
                              plots.histogram_figure(method, id_name, s[id_name], ood),
                              f"hist_{method}"))
    for method, sw in data.sweeps.items():
        settings = sw["settings"]
        if len(settings) < 2:
            continue
        metric = sw["select_by"]
        for param in sw["grid"]:
            values = [s["setting"].get(param) for s in settings]
            val = [s["val"]["mean"][metric] for s in settings]
            test = None
            if all(s.get("test") for s in settings):
                test = [sum(g[metric] for g in s["test"]["groups"].values())
                        / len(s["test"]["groups"]) for s in settings]
            out.append(Figure("Sweep curves", f"{method}: {param}",
                              plots.sweep_figure(method, param, values, metric, val, test,
                                                 sw["chosen"]["index"]),
                              f"sweep_{method}_{param}"))
    out += cd_figures(data, Figure)
    out += extra_figures(data)
    return out


def extra_figures(data: ReportData) -> list[Figure]:
    """Figures of the JSON files given with --include: shift-level grids (`featstore protocol
    shift-grid --json`) as heatmaps, and fitted Gscore models (`featstore gscore fit`) as a
    scatter of Gscore against the true metric over the meta-train sets with the regression
    line."""
    out: list[Figure] = []
    for k, extra in enumerate(data.extras):
        if isinstance(extra, dict) and "results" in extra and "metric" in extra:
            metric = extra["metric"]
            for r in extra["results"]:
                grid = np.array([[np.nan if v is None else v for v in row]
                                 for row in r["values"][metric]], dtype=float)
                sens = r.get("sensitivity", {})
                caption = f"{r['method']}: {metric} per cell; " + "; ".join(
                    f"{axis} correlation {number(v.get('correlation'))}, sensitivity "
                    f"{number(v.get('sensitivity'))}" for axis, v in sens.items())
                out.append(Figure("Shift-level grids", caption,
                                  plots.heatmap_figure(f"{r['method']}: {metric}", grid,
                                                       "covariate level", "semantic level"),
                                  f"shift_{k}_{r['method']}"))
        elif is_gscore_evaluation(extra):
            out += gscore_scatter_figures(extra, k)
        elif isinstance(extra, dict) and extra.get("format") and "regression" in extra:
            meta = extra.get("meta_train", {})
            points = meta.get("points")
            if not points:
                continue
            reg = extra["regression"]
            name = f"{extra['scorer']['name']} {extra['modelling']}-{extra['distance']}"
            caption = (f"{name}: Gscore vs true {extra['target']} over {len(points['true'])} "
                       f"meta-train sets; Pearson {number(meta.get('pearson'))}, Spearman "
                       f"{number(meta.get('spearman'))}, RMSE {number(meta.get('train_rmse'))}")
            out.append(Figure("Gscore", caption,
                              plots.scatter_figure(name, points["gscore"], points["true"],
                                                   "Gscore", extra["target"],
                                                   (reg["theta1"], reg["theta0"])),
                              f"gscore_{k}"))
        else:
            raise InputError(f"report --include #{k + 1}: not a result featstore can render "
                             "(expected `gscore evaluate --json`, `gscore fit` or `protocol "
                             "shift-grid --json` output)")
    return out


def is_gscore_evaluation(extra: Any) -> bool:
    """`featstore gscore evaluate --json` output."""
    return (isinstance(extra, dict) and "table" in extra and "models" in extra
            and isinstance(extra.get("config"), dict) and "methods" in extra["config"])


def gscore_tables(data: ReportData) -> list[Table]:
    """For every included `gscore evaluate` result and target: the RMSE table (Table 1/6
    layout: baselines and variants x detectors, best per column highlighted) and the
    correlation table (Pearson r / Spearman rho on meta-test sets [meta-train r])."""
    out: list[Table] = []
    for res in (e for e in data.extras if is_gscore_evaluation(e)):
        cfg = res["config"]
        methods = cfg["methods"]
        setting = "; ".join((cfg.get("describe") or {}).values())
        for target in cfg["targets"]:
            title = TARGET_TITLE.get(target, target)
            rows_raw: list[tuple[str, list[dict | None]]] = []
            base = res.get("baselines") or {}
            for key, label in (("confidence", "Confidence score (baseline)"),
                               ("auto_eval", "Auto evaluation (FD)")):
                cells = [base.get(m, {}).get(target, {}).get(key, {}).get("rmse")
                         for m in methods]
                if any(cells):
                    rows_raw.append((label, cells))
            for label, name in res["models"].items():
                rows_raw.append((name, [res["table"].get(m, {}).get(target, {}).get(label, {})
                                        .get("rmse") for m in methods]))
            means = [[float("nan") if not c or c.get("mean") is None else c["mean"]
                      for c in cells] for _, cells in rows_raw]
            best = _best_cells([[0.0, *row] for row in means],
                               {j + 1: min for j in range(len(methods))})
            unit = "rounds" if cfg.get("protocol") == "cv" else "partitions"
            out.append(Table(f"Gscore: RMSE (%) of predicted {title} on meta-test sets, mean "
                             f"[95% interval] over {cfg['repeats']} {unit} ({setting})",
                             ["Unsup. eval. method", *methods],
                             [[name, *map(mean_interval, cells)] for name, cells in rows_raw],
                             best))
            noise_rows = []
            for label, name in res["models"].items():
                for m in methods:
                    c = res["table"].get(m, {}).get(target, {}).get(label, {})
                    noise_rows.append([name, m, *[mean_interval(c.get(k)) for k in (
                        "rmse", "rmse_split", "floor", "pearson", "spearman")]])
            out.append(Table(f"Gscore: error on {title} beside the noise floor (rmse: sampled "
                             "targets; rmse_split: split-level targets; floor: the oracle "
                             "split-level predictor), Pearson / Spearman on "
                             f"{cfg.get('correlation_sets', 'meta-test')} sets, mean [95% "
                             f"interval] over {cfg['repeats']} {unit}",
                             ["Gscore", "detector", "rmse", "rmse_split", "floor", "pearson",
                              "spearman"], noise_rows, set()))
    return out


def gscore_scatter_figures(res: dict, k: int) -> list[Figure]:
    """Per detector and target: Gscore vs the true metric over the first repeat's meta-test
    sets, for the variant with the lowest mean RMSE."""
    out: list[Figure] = []
    points = res.get("points") or {}
    for target in res["config"]["targets"]:
        for m in res["config"]["methods"]:
            cells = res["table"].get(m, {}).get(target, {})
            ranked = sorted((c["rmse"]["mean"], label) for label, c in cells.items()
                            if c.get("rmse", {}).get("mean") is not None
                            and points.get(m, {}).get(target, {}).get(label))
            if not ranked:
                continue
            rmse, label = ranked[0]
            p = points[m][target][label]
            c = cells[label]
            caption = (f"{m}: {res['models'].get(label, label)} vs true {target}, "
                       f"{len(p['true'])} meta-test sets of repeat 1; RMSE {rmse:.2f} (mean "
                       f"over repeats), Pearson {cell_number(c.get('pearson'))}, Spearman "
                       f"{cell_number(c.get('spearman'))}")
            out.append(Figure("Gscore evaluation", caption,
                              plots.scatter_figure(f"{m}: {label}", p["gscore"], p["true"],
                                                   "Gscore", f"true {target} (%)"),
                              f"gscore_eval_{k}_{m}_{target.replace('@', '_')}"))
            if p.get("split_true") and p.get("split"):
                floor = (c.get("floor") or {}).get("mean")
                caption = (f"{m}: {res['models'].get(label, label)}, predicted vs true {target} "
                           "per OOD test set (its meta-sets' mean prediction, bar: their "
                           "range; x: the split-level target); band: ± the oracle floor "
                           f"{number(floor)}; rmse_split {mean_interval(c.get('rmse_split'))}")
                out.append(Figure("Gscore evaluation", caption,
                                  plots.pred_true_figure(f"{m}: {label}", p["split"],
                                                         p["split_true"], p["predicted"], floor,
                                                         f"{target} (%)"),
                                  f"gscore_pt_{k}_{m}_{target.replace('@', '_')}"))
    return out


_NUMBER = re.compile(r"^(#?[-+]?\d[\d.,e+-]*(±[\d.]+)?%?|–|)$")


def _cell_class(text: str, best: bool) -> str:
    """'best' for a highlighted cell, 'text' for a cell that is not a number (left-aligned)."""
    return " ".join(c for c in ("best" if best else "",
                                "" if _NUMBER.match(text) else "text") if c)


def _table_html(t: Table, table_id: str, heading: bool = True) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in t.header)
    body = []
    for i, row in enumerate(t.rows):
        cells = "".join(
            f"<td class=\"{_cell_class(c, (i, j) in t.best)}\">{html_text(c)}</td>"
            for j, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    title = f"<p class=\"caption\">{html_text(t.title)}</p>" if heading else ""
    return (f"{title}<table id=\"{table_id}\"><thead><tr>{head}</tr>"
            f"</thead><tbody>{''.join(body)}</tbody></table>")


_CSS = """body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;font-size:12px;margin-bottom:12px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:right;white-space:nowrap}
th{background:#f2f2f2}td:first-child,th:first-child{text-align:left}
#leaderboard td:nth-child(2),#leaderboard th:nth-child(2){text-align:left}
td.text{text-align:left}td.best{background:#d8f5d0;font-weight:bold}
.caption{font-size:12px;color:#444;margin:4px 0}
details{margin:8px 0}summary{font-size:16px;font-weight:600;cursor:pointer}
p.summary{font-size:14px;margin:4px 0}p.note{font-size:12px;color:#8a4b00;margin:2px 0}
figure{display:inline-block;margin:6px}figcaption{font-size:11px;color:#555;max-width:640px}
img{max-width:100%}.scroll{overflow-x:auto}"""

_CHECK_JS = """window.addEventListener('load', function () {
  var imgs = document.images, ok = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) ok++; }
  document.body.setAttribute('data-images-ok', ok + '/' + imgs.length);
});"""


def _section(title: str, body: str, open_: bool = False, sid: str = "") -> str:
    ident = f" id=\"{sid}\"" if sid else ""
    return (f"<details{ident}{' open' if open_ else ''}><summary>{html_text(title)}</summary>"
            f"<div class=\"scroll\">{body}</div></details>")


def _kind(t: Table) -> str:
    """Which section a table goes to, by its id."""
    tid = t.table_id
    if tid in ("ranking",) or tid.startswith(("pvalues-", "delong-")):
        return "Statistics"
    if tid in ("per-split", "settings"):
        return {"per-split": "Per split", "settings": "Settings and timings"}[tid]
    return "Gscore" if t.title.startswith("Gscore") else "Tables"


def render_html(data: ReportData, figs: list[Figure], tables: list[Table],
                rank_by: str = "mean") -> str:
    """The page: the summary line, row counts and the ranked leaderboard on top; everything
    else in collapsible sections (statistics with a one-line note where a test cannot reach
    significance at this size), then the figures, then the provenance."""
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>featstore report"
             f"</title><style>{_CSS}</style></head><body><h1>featstore report</h1>",
             f"<p class=\"summary\" id=\"summary\">"
             f"{html_text(summary_line(data.result, rank_by))}</p>",
             f"<p class=\"summary\" id=\"rows\">{html_text(rows_line(data.rows))}</p>",
             *(f"<p class=\"{'note' if line.startswith('WARNING') else 'summary'}\" "
               f"id=\"id-accuracy-{i}\">{html_text(line)}</p>"
               for i, line in enumerate(report_lines(data.id_checks)))]
    sections: dict[str, list[str]] = {}
    for i, t in enumerate(tables):
        tid = t.table_id or ("leaderboard" if i == 0 else f"table{i}")
        if tid == "leaderboard":
            parts.append(f"<div class=\"scroll\">{_table_html(t, tid)}</div>")
        else:
            sections.setdefault(_kind(t), []).append(_table_html(t, tid))
    notes = [*data.notes, *statistics_notes(data)]
    if notes:
        sections.setdefault("Statistics", []).insert(0, "".join(
            f"<p class=\"note\">{html_text(n)}</p>" for n in notes))
    for t in notes_tables(data):
        sections.setdefault("Skipped scorers and adjusted defaults", []).append(
            _table_html(t, _note_id(t)))
    for title, body in sections.items():
        parts.append(_section(title, "".join(body), sid=f"section-{_slug(title)}"))
    by_section: dict[str, list[str]] = {}
    for f in figs:
        b64 = base64.b64encode(f.png).decode("ascii")
        by_section.setdefault(f.section, []).append(
            f"<figure><img alt=\"{html_text(f.caption)}\" src=\"data:image/png;base64,{b64}\">"
            f"<figcaption>{html_text(f.caption)}</figcaption></figure>")
    for title, body in by_section.items():
        parts.append(_section(title, "".join(body), sid=f"section-{_slug(title)}"))
    prov = "".join(f"<tr><th>{html_text(k)}</th><td>{html_text(str(v))}</td></tr>"
                   for k, v in data.provenance.items())
    parts.append(_section("Provenance", f"<table id=\"provenance\">{prov}</table>"))
    parts.append(f"<script>{_CHECK_JS}</script></body></html>")
    return "\n".join(parts)


def _slug(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def render_markdown(data: ReportData, figs: list[Figure], tables: list[Table],
                    image_dir: Path, rank_by: str = "mean") -> str:
    lines = ["# featstore report", "", md_text(summary_line(data.result, rank_by)), "",
             md_text(rows_line(data.rows)), "",
             *[f"{md_text(line)}\n" for line in report_lines(data.id_checks)],
             "## Provenance", "", "| | |", "|---|---|"]
    lines += [f"| {md_text(k)} | {md_text(v)} |" for k, v in data.provenance.items()]
    for t in [*tables, *notes_tables(data)]:
        lines += ["", f"## {md_text(t.title)}", "",
                  "| " + " | ".join(md_text(h) for h in t.header) + " |",
                  "|" + "---|" * len(t.header)]
        for i, row in enumerate(t.rows):
            lines.append("| " + " | ".join(f"**{md_text(c)}**" if (i, j) in t.best
                                           else md_text(c) for j, c in enumerate(row)) + " |")
    if notes := [*data.notes, *statistics_notes(data)]:
        lines += ["", *[f"- {md_text(n)}" for n in notes]]
    section = None
    image_dir.mkdir(parents=True, exist_ok=True)
    for f in figs:
        if f.section != section:
            section = f.section
            lines += ["", f"## {md_text(section)}", ""]
        atomic_write_output(image_dir / f"{f.slug}.png", f.png)
        lines.append(f"![{md_text(f.caption)}]({image_dir.name}/{f.slug}.png)")
    return "\n".join(lines) + "\n"
