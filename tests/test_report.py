"""`featstore report`: the HTML report and its Markdown twin, checked as a person would see
them: the demo's report rendered in a real headless Chromium (page loads, no console errors,
every image decodes, one leaderboard row per scorer, a non-blank screenshot). References:
the evaluation result the report was built from, PIL for decoding images."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from PIL import Image

from cli.app import main
from featstore.workflows.report import write_report
from scorers.evaluate import evaluate

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"]


def _embedded_images(html: str) -> list[Image.Image]:
    out = []
    for b64 in re.findall(r'src="data:image/png;base64,([^"]+)"', html):
        im = Image.open(io.BytesIO(base64.b64decode(b64)))
        im.load()
        out.append(im)
    return out


def test_report_from_a_store_has_tables_plots_and_markdown(structured_store, tmp_path):
    html_path, md_path = write_report(structured_store.path, tmp_path / "r.html",
                                      methods=["msp", "vim", "knn"])
    html = html_path.read_text()
    result = evaluate(structured_store, ["msp", "vim", "knn"])
    table = html.split('<table id="leaderboard">')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + 3                       # header + one row per scorer
    vim_auroc = result["methods"]["vim"]["groups"]["far"]["auroc"]
    assert f"{vim_auroc:.1f}" in table
    assert "sha256 of the head (W, b)" in html and structured_store.model_sha256 in html
    images = _embedded_images(html)
    # 2 OOD test splits x ROC/PR + 3 histogram figures; no CD diagram: over 2 splits
    # Nemenyi's CD for 3 scorers is 2.34, not below 2, the largest possible gap of mean ranks
    assert len(images) == 2 + 3 and all(im.size[0] > 100 for im in images)
    md = md_path.read_text()
    assert "| scorer |" in md and md.count("![") == 5
    for link in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert (md_path.parent / link).is_file()
    _check_statistics(html, structured_store, ["msp", "vim", "knn"])


def _check_statistics(html: str, store, methods: list[str]) -> None:
    """Intervals beside the leaderboard values (equal to evaluate's with the same bootstrap),
    a p-value matrix per group and per split (DeLong p equal to scorers.stats.delong_test on
    the scores, Holm over the pairs), and the ranking table with a CD diagram."""
    from scorers.evaluate import score_splits
    from scorers.stats import BootstrapSpec, delong_test, holm

    result = evaluate(store, methods, ci=BootstrapSpec())
    table = html.split('<table id="leaderboard">')[1].split("</table>")[0]
    far = result["methods"][methods[1]]["groups"]["far"]
    lo, hi = far["auroc_ci"]
    assert f"{far['auroc']:.1f}±{(hi - lo) / 2:.1f}" in table
    assert ("±h = half the width of the 95% percentile interval (stratified bootstrap, 1000 "
            "resamples, seed 0)") in html
    for group in ("near", "far"):
        matrix = html.split(f'<table id="pvalues-{group}">')[1].split("</table>")[0]
        assert matrix.count("<tr>") == 1 + len(methods)
    split = "ood/far/faint"
    scores = {m: score_splits(store, m, {}, ["id/test", split])[0] for m in methods}
    raw = [delong_test(scores[a]["id/test"], scores[a][split], scores[b]["id/test"],
                       scores[b][split]).p_value
           for i, a in enumerate(methods) for b in methods[i + 1:]]
    matrix = html.split('<table id="delong-ood_far_faint">')[1].split("</table>")[0]
    header = re.findall(r"<th>([^<]*)</th>", matrix)[1:]      # the leaderboard's order
    rows = {r[0]: r[1:] for r in (re.findall(r"<td[^>]*>([^<]*)</td>", tr)
                                  for tr in matrix.split("<tr>")[2:])}
    p_ab = float(rows[methods[0]][header.index(methods[1])])
    want = holm(np.array(raw))[0]
    assert p_ab == pytest.approx(want, rel=6e-2, abs=5e-4)     # printed to 2-3 digits
    assert '<table id="ranking">' in html and "Friedman chi2" in html
    assert 'alt="critical-difference diagram' not in html
    assert ("ranking by auroc: no critical-difference diagram: Nemenyi&#x27;s CD over 2 OOD "
            "test splits is 2.3, not below 2") in html


def test_report_from_results_json_and_bad_source(structured_store, tmp_path, capsys):
    result = evaluate(structured_store, ["energy"])
    (tmp_path / "results.json").write_text(json.dumps(result))
    html_path, _ = write_report(tmp_path / "results.json", tmp_path / "r.html")
    assert "energy" in html_path.read_text()
    try:
        main(["report", str(tmp_path / "nothing"), "--out", str(tmp_path / "x.html")])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 1 and "neither a store directory nor a results JSON" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.html").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test "
                                              "installs it)")
def test_demo_report_in_headless_chromium(demo_dir, tmp_path):
    """The report `featstore demo` wrote (`write_report(STORE, DIR/report.html)`, the
    session's demo run): the page loads without console errors, every image decodes, the
    leaderboard has one row per evaluated scorer, and a screenshot is not blank."""
    html_path = demo_dir / "report.html"
    url = html_path.resolve().as_uri()
    profile = tmp_path / "profile"
    dom = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}",
                          "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
                          "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln]
    assert not [ln for ln in console if "error" in ln.lower()], console
    ok = re.search(r'data-images-ok="(\d+)/(\d+)"', dom.stdout)
    assert ok is not None, "the page's load handler did not run"
    decoded, total = int(ok.group(1)), int(ok.group(2))
    assert total > 0 and decoded == total
    result = evaluate(__import__("featstore").Store.open(demo_dir / "store"))
    table = dom.stdout.split('<table id="leaderboard">')[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + len(result["methods"])
    # one-line cells: value±h (half the interval's width)
    assert re.search(r"\d+\.\d±\d+\.\d", table)
    k, n = len(result["methods"]), len(result["ood_splits"])
    pairs = k * (k - 1) // 2
    if pairs * 2 / 1001 >= 0.05:  # Holm over the pairs: no bootstrap p can fall below 0.05
        assert '<table id="pvalues-far">' not in dom.stdout
        assert f"Holm over {pairs} pairs raises it to" in dom.stdout
    from scipy.stats import studentized_range
    cd = studentized_range.ppf(0.95, k, np.inf) / np.sqrt(2) * np.sqrt(k * (k + 1) / (6 * n))
    assert ('alt="critical-difference diagram, auroc' in dom.stdout) == (cd < k - 1)
    shot = tmp_path / "shot.png"
    run = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}",
                          f"--screenshot={shot}", "--window-size=1400,2000",
                          "--virtual-time-budget=10000", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.std() > 10.0 and (pixels < 128).mean() > 0.01   # text and plots drawn


_MEASURE_JS = """<script>window.addEventListener('load', function () {
  var t = document.getElementById('leaderboard'), h = [];
  for (var i = 0; i < t.rows.length; i++) h.push(t.rows[i].getBoundingClientRect().height);
  document.body.setAttribute('data-row-heights', h.join(','));
  document.body.setAttribute('data-table-right', t.getBoundingClientRect().right);
  document.body.setAttribute('data-viewport', window.innerWidth);
});</script></body>"""


def _leaderboard_in_chromium(html_path, tmp_path) -> tuple[str, list[float], float, float]:
    """Chromium at 1400 px: the DOM, the leaderboard's row heights and right edge, and the
    viewport width, measured by a script injected into a copy of the page."""
    page = tmp_path / "measured.html"
    page.write_text(html_path.read_text(encoding="utf-8").replace("</body>", _MEASURE_JS),
                    encoding="utf-8")
    dom = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={tmp_path / 'p2'}",
                          "--window-size=1400,1000", "--virtual-time-budget=10000",
                          "--dump-dom", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    heights = [float(v) for v in re.search(r'data-row-heights="([^"]+)"',
                                           dom.stdout).group(1).split(",")]
    right = float(re.search(r'data-table-right="([^"]+)"', dom.stdout).group(1))
    viewport = float(re.search(r'data-viewport="([^"]+)"', dom.stdout).group(1))
    return dom.stdout, heights, right, viewport


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test "
                                              "installs it)")
def test_demo_report_leaderboard_ranked_one_line_fits_1400px(demo_dir, tmp_path):
    """The demo's leaderboard at 1400 px: ranked by the mean of the near and far AUROC (the
    reference: evaluate's group AUROCs, averaged and sorted here), every row one line high
    (a wrapped cell would double its row), the table inside the window, and the best-per-
    group summary line and row counts above it."""
    dom, heights, right, viewport = _leaderboard_in_chromium(demo_dir / "report.html",
                                                             tmp_path)
    assert viewport == 1400 and right <= viewport
    assert max(heights) - min(heights) < 2.0, heights
    result = evaluate(__import__("featstore").Store.open(demo_dir / "store"))
    mean = {m: (r["groups"]["near"]["auroc"] + r["groups"]["far"]["auroc"]) / 2
            for m, r in result["methods"].items()}
    want = sorted(mean, key=lambda m: (-mean[m], m))
    table = dom.split('<table id="leaderboard">')[1].split("</table>")[0]
    rows = [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in table.split("<tr>")[2:]]
    assert [r[1] for r in rows] == want and [r[0] for r in rows] == [
        str(i + 1) for i in range(len(want))]
    assert [r[2] for r in rows] == [f"{mean[m]:.1f}" for m in want]
    summary = re.search(r'<p class="summary" id="summary">([^<]*)</p>', dom).group(1)
    best_near = max(r["groups"]["near"]["auroc"] for r in result["methods"].values())
    assert "near AUROC: " in summary and f"{best_near:.1f}" in summary
    rows_line = re.search(r'<p class="summary" id="rows">([^<]*)</p>', dom).group(1)
    store = __import__("featstore").Store.open(demo_dir / "store")
    for split in result["ood_splits"]:
        assert f"{split} {store.split(split).num_rows:,}" in rows_line
    assert "<details" in dom and "<summary>Statistics</summary>" in dom


def test_report_includes_shift_grids_and_gscore_scatter(structured_store, tmp_path):
    """--include JSON: a shift grid (`protocol shift-grid --json` layout) becomes a heatmap
    with its correlation/sensitivity in the caption; a Gscore model with meta-train points
    becomes a scatter. Reference: the hand-written JSON inputs."""
    shift = {"metric": "auroc", "results": [{
        "method": "msp", "values": {"auroc": [[60.0, 65.0], [None, 70.0]]},
        "counts": [[20, 20], [3, 20]],
        "sensitivity": {"semantic": {"correlation": 1.0, "sensitivity": 5.0},
                        "covariate": {"correlation": 1.0, "sensitivity": 5.0}}}]}
    model = {"format": "featstore-gscore", "modelling": "ude", "distance": "wasserstein",
             "target": "fpr95", "scorer": {"name": "msp", "params": {}},
             "regression": {"theta1": -2.0, "theta0": 90.0, "clip": True},
             "meta_train": {"pearson": -0.9, "spearman": -0.8, "train_rmse": 4.2,
                            "points": {"gscore": [1.0, 2.0, 3.0], "true": [88.0, 86.5, 84.0]}}}
    (tmp_path / "shift.json").write_text(json.dumps(shift))
    (tmp_path / "g.json").write_text(json.dumps(model))
    html_path, md_path = write_report(structured_store.path, tmp_path / "r.html",
                                      methods=["msp"],
                                      include=[tmp_path / "shift.json", tmp_path / "g.json"])
    html = html_path.read_text()
    assert "Shift-level grids" in html and "semantic correlation 1.00, sensitivity 5.00" in html
    assert "Gscore vs true fpr95 over 3 meta-train sets; Pearson -0.90" in html
    assert len(_embedded_images(html)) == 2 + 1 + 2   # curves, histogram, heatmap, scatter
