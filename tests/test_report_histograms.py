"""The report's histogram figure: its title, its legend and the panel titles never overlap
and stay inside the figure, for 1, 2, 4 and 5 OOD panels (1 and 2 panels make the narrowest
figures, where a title once ran into the legend). Reference: matplotlib's own rendered text
extents (Agg renderer) of the drawn figure, and the PNG it returns."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.image import imread

from featstore.workflows.report.plots import _histogram_canvas, histogram_figure

SPLITS = ["ood/near/digits6-9", "ood/far/photos", "ood/far/textures", "ood/far/faces",
          "ood/far/noise"]


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("panels", [1, 2, 4, 5])
def test_title_legend_and_panel_titles_do_not_overlap(panels):
    rng = np.random.default_rng(0)
    ood = {s: rng.normal(0.0, 1.0, 120) for s in SPLITS[:panels]}
    png = histogram_figure("odin_perturbed", "id/test", rng.normal(1.0, 1.0, 135), ood)
    assert imread(io.BytesIO(png)).ndim == 3
    canvas = _histogram_canvas(panels, "id/test")
    fig = canvas.fig
    renderer = fig.canvas.get_renderer()
    title = canvas.title.get_window_extent(renderer)
    legend = fig.legends[0].get_window_extent(renderer)
    whole = fig.bbox
    assert canvas.title.get_text() == "odin_perturbed: score histograms (higher = more ID)"
    for box in (title, legend):
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1 and box.y1 <= whole.y1, box
    assert not _overlap(title, legend), (title, legend)
    for ax in canvas.axes:
        panel_title = ax.title.get_window_extent(renderer)
        assert not _overlap(panel_title, legend) and not _overlap(panel_title, title)
        assert ax.get_window_extent(renderer).y1 < legend.y0


def test_overlap_check_sees_an_overlap():
    from matplotlib.transforms import Bbox

    assert _overlap(Bbox([[0, 0], [2, 2]]), Bbox([[1, 1], [3, 3]]))
    assert not _overlap(Bbox([[0, 0], [1, 1]]), Bbox([[2, 0], [3, 1]]))
