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
from featstore.report import write_report
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
    assert f"{vim_auroc:.2f}" in table
    assert "sha256 of the head (W, b)" in html and structured_store.model_sha256 in html
    images = _embedded_images(html)
    # 2 OOD test splits x ROC/PR + 3 histogram figures + 2 CD diagrams (AUROC, FPR95)
    assert len(images) == 2 + 3 + 2 and all(im.size[0] > 100 for im in images)
    md = md_path.read_text()
    assert "| scorer |" in md and md.count("![") == 7
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
    assert f"{far['auroc']:.2f} [{lo:.1f}, {hi:.1f}]" in table
    assert "95% percentile intervals (stratified bootstrap, 1000 resamples, seed 0)" in html
    for group in ("near", "far"):
        matrix = html.split(f'<table id="pvalues-{group}">')[1].split("</table>")[0]
        assert matrix.count("<tr>") == 1 + len(methods)
    split = "ood/far/faint"
    scores = {m: score_splits(store, m, {}, ["id/test", split])[0] for m in methods}
    raw = [delong_test(scores[a]["id/test"], scores[a][split], scores[b]["id/test"],
                       scores[b][split]).p_value
           for i, a in enumerate(methods) for b in methods[i + 1:]]
    matrix = html.split('<table id="delong-ood_far_faint">')[1].split("</table>")[0]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", matrix)
    p_ab = float(cells[2])                    # row 0 (first method), column of the second
    want = holm(np.array(raw))[0]
    assert p_ab == pytest.approx(want, rel=6e-2, abs=5e-4)     # printed to 2-3 digits
    assert '<table id="ranking">' in html and "Friedman chi2" in html
    assert 'alt="critical-difference diagram, auroc' in html


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
    # intervals beside the values, p-value matrices and the CD diagram in the rendered page
    assert re.search(r"\d+\.\d\d \[\d+\.\d, \d+\.\d\]", table)
    assert '<table id="pvalues-far">' in dom.stdout and '<table id="pvalues-near">' in dom.stdout
    matrix = dom.stdout.split('<table id="pvalues-far">')[1].split("</table>")[0]
    assert matrix.count("<tr>") == 1 + len(result["methods"])
    assert 'alt="critical-difference diagram, auroc' in dom.stdout
    shot = tmp_path / "shot.png"
    run = subprocess.run([CHROMIUM, *CHROME_FLAGS, f"--user-data-dir={profile}",
                          f"--screenshot={shot}", "--window-size=1400,2000",
                          "--virtual-time-budget=10000", url],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.std() > 10.0 and (pixels < 128).mean() > 0.01   # text and plots drawn


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
