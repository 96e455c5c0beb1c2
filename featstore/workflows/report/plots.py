"""Matplotlib (Agg) figures of an evaluation, returned as PNG bytes.

ROC and PR curves are computed here from the scores (ID positive, higher = more ID) with the
same tie handling as scorers.metrics: one point per distinct score value.
"""

from __future__ import annotations

import atexit
import functools
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path


def _usable_dir(path: Path) -> bool:
    """Whether matplotlib could use `path` as its directory: created if missing (as
    matplotlib does), then a writable directory."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def _matplotlib_dirs() -> list[Path]:
    """The config and the cache directory matplotlib uses without $MPLCONFIGDIR (its
    `_get_config_or_cache_dir`): $XDG_CONFIG_HOME or ~/.config, and $XDG_CACHE_HOME or
    ~/.cache, each /matplotlib on Linux and FreeBSD; ~/.matplotlib elsewhere."""
    home = Path.home()
    if not sys.platform.startswith(("linux", "freebsd")):
        return [home / ".matplotlib"]
    return [Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "matplotlib",
            Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "matplotlib"]


def _private_config_dir_if_needed() -> None:
    """Give matplotlib a private temporary config / cache directory (removed at exit) when
    its default config or cache directory (`_matplotlib_dirs`) cannot be used, or there is
    no home directory: otherwise it prints warnings on stderr ("mkdir -p failed", "created a
    temporary cache directory"), which `--quiet` cannot silence. Both directories are
    checked: a writable config directory beside an unwritable cache (HOME unwritable,
    $XDG_CONFIG_HOME set) still warned."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    try:
        if all(_usable_dir(d) for d in _matplotlib_dirs()):
            return
    except (RuntimeError, KeyError):  # no home directory (Path.home)
        pass
    private = tempfile.mkdtemp(prefix="featstore-mpl-")
    atexit.register(shutil.rmtree, private, True)
    os.environ["MPLCONFIGDIR"] = private


_private_config_dir_if_needed()

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, ScalarFormatter  # noqa: E402

DPI = 90


def _png(fig: plt.Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def curve_points(id_scores: np.ndarray, ood_scores: np.ndarray) -> dict[str, np.ndarray]:
    """FPR, TPR (ROC) and recall, precision (PR, ID positive) at every distinct threshold."""
    scores = np.concatenate([id_scores, ood_scores])
    positive = np.concatenate([np.ones(id_scores.size), np.zeros(ood_scores.size)])
    order = np.argsort(-scores, kind="stable")
    s, p = scores[order], positive[order]
    last = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    tp = np.cumsum(p)[last]
    fp = (last + 1) - tp
    tpr = np.r_[0.0, tp / max(id_scores.size, 1)]
    fpr = np.r_[0.0, fp / max(ood_scores.size, 1)]
    precision = np.r_[1.0, tp / (tp + fp)]
    return {"fpr": fpr, "tpr": tpr, "recall": tpr, "precision": precision}


def roc_pr_figure(split: str, curves: Mapping[str, Mapping[str, np.ndarray]],
                  note: str = "") -> bytes:
    """ROC and PR curves of the given scorers for one OOD split, side by side; the legend
    (in the order given, e.g. best first) sits right of the plots, off the data; `note`
    is added to the titles (e.g. "top 6 of 23 by AUROC")."""
    many = len(curves) > 12
    fig = Figure(figsize=(11.5 if many else 10.5, 4.2))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    # tab10/tab20 are ListedColormaps (typed as Colormap, which has no .colors)
    colors = plt.cm.tab20.colors if many else plt.cm.tab10.colors  # type: ignore[attr-defined]
    for i, (name, c) in enumerate(curves.items()):
        style = {"color": colors[i % len(colors)], "ls": "-" if i < len(colors) else "--",
                 "lw": 1.3, "label": name}
        ax1.plot(c["fpr"], c["tpr"], **style)
        ax2.plot(c["recall"], c["precision"], **style)
    ax1.plot([0, 1], [0, 1], ls=":", c="grey", lw=0.8)
    suffix = f" ({note})" if note else ""
    ax1.set(xlabel="FPR (OOD accepted)", ylabel="TPR (ID accepted)")
    ax2.set(xlabel="recall (ID)", ylabel="precision (ID)", ylim=(0, 1.02))
    ax1.set_title(f"ROC · {split}", fontsize=10)
    ax2.set_title("PR (ID positive)", fontsize=10)
    if suffix:
        fig.suptitle(suffix.strip(" ()"), fontsize=9, y=1.0)
    ax2.legend(fontsize=7, ncol=2 if many else 1, loc="upper left", bbox_to_anchor=(1.02, 1.0),
               borderaxespad=0.0, frameon=False)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    # fixed margins (no tight_layout pass); the saved image's bounding box takes in the
    # legend right of the axes
    fig.subplots_adjust(left=0.07, right=0.8 if many else 0.84, bottom=0.13, top=0.9,
                        wspace=0.28)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _compact_axis(axis) -> None:
    """At most 4 ticks, with a shared offset / exponent instead of long tick labels (scores
    such as ODIN's 0.16705 ... 0.16875 otherwise print over each other)."""
    axis.set_major_locator(MaxNLocator(nbins=4))
    formatter = ScalarFormatter(useOffset=True, useMathText=False)
    formatter.set_powerlimits((-3, 4))
    axis.set_major_formatter(formatter)


#: bins of a histogram panel (edges: HIST_BINS + 1 over the panel's ID and OOD range)
HIST_BINS = 39


class _HistogramCanvas:
    """One Agg figure with `panels` histogram panels, drawn again for every scorer: the
    figure, its axes, ticks, legend and the two filled step outlines per panel are built once
    and only their data, limits and titles change (creating axes and clearing them dominated
    the report's time). Layout margins are fixed, so one draw per PNG."""

    def __init__(self, panels: int, id_name: str):
        cols = min(4, panels)
        rows = int(np.ceil(panels / cols))
        # at least two panels wide, so the title fits over a single panel
        self.fig = Figure(figsize=(max(3.2 * cols, 6.4), 2.5 * rows + 0.75))
        FigureCanvasAgg(self.fig)
        axes = list(self.fig.subplots(rows, cols, squeeze=False).flat)
        self.axes = axes[:panels]
        for ax in axes[panels:]:
            ax.axis("off")
        edges = np.linspace(0.0, 1.0, HIST_BINS + 1)
        zeros = np.zeros(HIST_BINS)
        self.steps = []
        for ax in self.axes:
            pair = (ax.stairs(zeros, edges, fill=True, alpha=0.55, color="tab:blue",
                              label=id_name),
                    ax.stairs(zeros, edges, fill=True, alpha=0.55, color="tab:red",
                              label="OOD"))
            self.steps.append(pair)
            ax.tick_params(labelsize=7)
            _compact_axis(ax.xaxis)
            _compact_axis(ax.yaxis)
            for offset in (ax.xaxis.get_offset_text(), ax.yaxis.get_offset_text()):
                offset.set_fontsize(7)
        # title, then the legend on its own line under it, then the panels: positions in
        # inches from the top, so the title never runs into the legend however few panels
        # (hence however narrow the figure) there are
        height = 2.5 * rows + 0.75
        self.title = self.fig.suptitle("", fontsize=10, y=1.0 - 0.06 / height, va="top")
        handles, labels = self.axes[0].get_legend_handles_labels()
        self.fig.legend(handles, labels, fontsize=8, ncol=2, loc="upper center",
                        frameon=False, bbox_to_anchor=(0.5, 1.0 - 0.3 / height))
        self.fig.subplots_adjust(left=0.05, right=0.985, bottom=0.45 / height,
                                 top=1.0 - 1.0 / height, wspace=0.25, hspace=0.4)

    def png(self, method: str, id_scores: np.ndarray, ood: Mapping[str, np.ndarray]) -> bytes:
        for ax, (id_step, ood_step), (split, scores) in zip(self.axes, self.steps,
                                                           ood.items(), strict=True):
            lo = float(min(id_scores.min(), scores.min()))
            hi = float(max(id_scores.max(), scores.max()))
            edges = np.linspace(lo, hi if hi > lo else lo + 1.0, HIST_BINS + 1)
            id_density = np.histogram(id_scores, bins=edges, density=True)[0]
            ood_density = np.histogram(scores, bins=edges, density=True)[0]
            id_step.set_data(id_density, edges)
            ood_step.set_data(ood_density, edges)
            pad = 0.05 * (edges[-1] - edges[0])
            ax.set_xlim(edges[0] - pad, edges[-1] + pad)
            ax.set_ylim(0.0, 1.05 * max(float(id_density.max()), float(ood_density.max()),
                                        1e-12))
            ax.set_title(split, fontsize=8)
        self.title.set_text(f"{method}: score histograms (higher = more ID)")
        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=DPI)
        return buf.getvalue()


@functools.lru_cache(maxsize=4)
def _histogram_canvas(panels: int, id_name: str) -> _HistogramCanvas:
    return _HistogramCanvas(panels, id_name)


def histogram_figure(method: str, id_name: str, id_scores: np.ndarray,
                     ood: Mapping[str, np.ndarray]) -> bytes:
    """ID vs OOD score histograms of one scorer, one panel per OOD split (HIST_BINS equal
    bins over the panel's range, each histogram normalised to unit area, drawn as a filled
    step outline); one legend for the figure, on its own line between the title and the
    panels."""
    return _histogram_canvas(len(ood), id_name).png(method, np.asarray(id_scores),
                                                    {k: np.asarray(v) for k, v in ood.items()})


def sweep_figure(method: str, param: str, values: Sequence, metric: str,
                 val: Sequence[float], test: Sequence[float] | None, chosen: int) -> bytes:
    """Metric against one hyperparameter: val mean (chooses) and test mean (reported)."""
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    x = np.arange(len(values))
    ax.plot(x, val, marker="o", label="val (chooses)")
    if test is not None:
        ax.plot(x, test, marker="s", ls="--", label="test")
    ax.axvline(chosen, c="green", ls=":", lw=1)
    ax.set_xticks(x, [str(v) for v in values], fontsize=7)
    ax.set(xlabel=param, ylabel=metric, title=f"{method}: {metric} vs {param}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _png(fig)


def heatmap_figure(title: str, grid: np.ndarray, row_label: str, col_label: str) -> bytes:
    """An L x L grid of a metric (NaN = N/A cell)."""
    fig, ax = plt.subplots(figsize=(4.6, 4.0))
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", origin="lower")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, "N/A" if np.isnan(v) else f"{v:.0f}", ha="center", va="center",
                fontsize=6, color="white")
    ax.set(xlabel=col_label, ylabel=row_label, title=title)
    fig.colorbar(im, ax=ax, fraction=0.046)
    return _png(fig)


def scatter_figure(title: str, x: Sequence[float], y: Sequence[float], xlabel: str,
                   ylabel: str, line: tuple[float, float] | None = None) -> bytes:
    """Scatter with an optional regression line y = a x + b."""
    fig, ax = plt.subplots(figsize=(4.8, 3.6))
    ax.scatter(x, y, s=10, alpha=0.7)
    if line is not None and len(x):
        xs = np.linspace(min(x), max(x), 50)
        ax.plot(xs, line[0] * xs + line[1], c="tab:red", lw=1.2)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    return _png(fig)


def pred_true_figure(title: str, split: Sequence[str], split_true: Sequence[float],
                     predicted: Sequence[float], floor: float | None, unit: str,
                     label_worst: int = 5) -> bytes:
    """Predicted vs true per OOD test set: x the split-level target, y the mean prediction of
    the split's meta-sets with a bar over their range; the diagonal, a band of ± `floor` (the
    oracle split-level predictor's RMSE) around it, and the `label_worst` sets furthest from
    the diagonal named."""
    names = list(dict.fromkeys(split))
    pos = {n: i for i, n in enumerate(names)}
    groups: list[list[float]] = [[] for _ in names]
    xs = np.zeros(len(names))
    for s, t, p in zip(split, split_true, predicted, strict=True):
        groups[pos[s]].append(float(p))
        xs[pos[s]] = float(t)
    mean = np.array([np.mean(g) for g in groups])
    lo = mean - np.array([np.min(g) for g in groups])
    hi = np.array([np.max(g) for g in groups]) - mean
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    top = float(max(100.0, xs.max(initial=0), (mean + hi).max(initial=0)))
    line = np.array([0.0, top])
    if floor is not None and np.isfinite(floor):
        ax.fill_between(line, line - floor, line + floor, color="tab:gray", alpha=0.2,
                        label=f"± floor {floor:.2f}")
    ax.plot(line, line, c="black", lw=0.8)
    ax.errorbar(xs, mean, yerr=[lo, hi], fmt="o", ms=3, lw=0.8, capsize=2, label="test sets")
    for i in np.argsort(-np.abs(mean - xs))[:label_worst]:
        ax.annotate(names[i].split("/")[-1], (xs[i], mean[i]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel=f"true {unit} (split level)", ylabel=f"predicted {unit}", title=title,
           xlim=(0, top), ylim=(0, top))
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    return _png(fig)


def cd_figure(title: str, mean_ranks: Mapping[str, float], cd: float,
              cliques: Sequence[Sequence[str]]) -> bytes:
    """Critical-difference diagram (Demšar 2006): methods on a mean-rank axis (1 = best, at
    the left), the CD as a bar above the axis, and a thick line joining each clique of
    methods whose mean ranks differ by less than the CD."""
    names = sorted(mean_ranks, key=lambda m: mean_ranks[m])
    k = len(names)
    lo, hi = 1, max(k, 2)
    half = (k + 1) // 2
    rows = max(half, k - half)
    top = 0.35 + 0.22 * len(cliques)          # the clique bars sit between axis and labels
    fig, ax = plt.subplots(figsize=(7.5, 1.4 + 0.3 * rows + 0.15 * len(cliques)))
    ax.set_xlim(lo - 0.3, hi + 0.3)
    ax.set_ylim(-(top + 0.45 * rows + 0.3), 1.6)
    ax.axis("off")
    ax.plot([lo, hi], [0, 0], c="black", lw=1)
    for tick in range(lo, hi + 1):
        ax.plot([tick, tick], [0, 0.12], c="black", lw=1)
        ax.text(tick, 0.22, str(tick), ha="center", va="bottom", fontsize=8)
    ax.plot([lo, lo + cd], [1.1, 1.1], c="tab:red", lw=2)
    ax.text(lo + cd / 2, 1.2, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8,
            color="tab:red")
    for i, name in enumerate(names):
        r = mean_ranks[name]
        left = i < half
        row = i if left else k - 1 - i
        y = -(top + 0.45 * row)
        x_text = lo - 0.25 if left else hi + 0.25
        ax.plot([r, r, x_text], [0, y, y], c="grey", lw=0.8)
        ax.text(x_text, y, f"{name} ({r:.2f})", ha="right" if left else "left",
                va="center", fontsize=8)
    for j, clique in enumerate(cliques):
        ranks = [mean_ranks[m] for m in clique]
        y = -0.2 - 0.22 * j
        ax.plot([min(ranks) - 0.03, max(ranks) + 0.03], [y, y], c="black", lw=3)
    ax.set_title(title, fontsize=9)
    return _png(fig)
