"""Benchmark: every applicable featstore scorer against pytorch-ood 0.4 (and scikit-learn's
NearestNeighbors for KNN) on ImageNet-shaped arrays in real stores.

Run ``python -m benchmarks.bench_scorers [--quick] [--dtype float32|float16|both]
[--only msp,vim,...] [--knn-rows N] [--seed 0]`` (needs the ``bench`` extra:
``pip install -e '.[dev,bench]'``).

Data (generated vectorized with numpy's PCG64 seeded with ``--seed``; ``--quick`` divides
every row count by 10): C = 1000 classes, D = 2048. Pre-activation features are a class centre
(N(0, 0.05^2) per entry) plus a shared offset (N(0.2, 0.3^2) per dimension) plus Gaussian
noise with a decaying per-dimension scale 1 / sqrt(1 + r / 128) (r a random rank of the
dimension), then ReLU: non-negative features, ~35% exact zeros. The head (W, b) is the
nearest-class-mean classifier (LDA with isotropic covariance) on the analytic post-ReLU class
means, scaled by 2 (~94% top-1 on id/test). Splits: id/train 100k, id/val 10k, id/test 50k
(balanced labels), and four OOD splits of 10k: ood/near/novel (1000 unseen class centres
from the same prior), ood/near/blend (mean of two ID centres), ood/far/sparse (per-row random
centres, wider and shifted down) and ood/far/noise (no centre, noise x2). Logits are
features @ W.T + b in float32 from the float32 features; the float16 store holds the same
features rounded to float16 (and the same logits). Both are written with
``Store.from_arrays`` into a temporary directory under /tmp, deleted at the end.

Measurement: every (implementation, scorer) runs in a fresh child interpreter
(``python -m benchmarks.bench_scorers --child SPEC``). The child imports everything it will
use (featstore/scorers plus faiss, scipy and the scikit-learn modules scorers import lazily;
or torch and pytorch_ood), featstore children fit and score their scorer once on a tiny store
(D = 32, C = 10: Numba kernels compiled or loaded, code paths imported), and each side gets
its data ready:

- featstore: ``Store.open`` (lazy: no array is read); fit + score read the store's chunks from
  HDF5 (warm OS page cache) inside the timed region;
- pytorch-ood: the arrays it needs are loaded from the same store into RAM as float32 torch
  tensors (float16 features upcast) before the clock starts: its times and memory exclude
  loading its inputs (their size is listed in the notes).

Then the child records its resident set size (VmRSS), resets the kernel's RSS high-water
mark (``echo 5 > /proc/self/clear_refs``), runs fit once (pytorch-ood: the detector's
construction with it, where ViM computes u = -pinv(W) b as featstore's fit does) and score
once on id/test plus the 4 OOD splits (90k rows at full size), and reads the high-water mark
(VmHWM, what ``getrusage(RUSAGE_SELF).ru_maxrss`` reports). "peak MB" = VmHWM - VmRSS
before fit: the most memory the method added beyond imports and its (mapped or loaded)
inputs, in MiB. One repeat. pytorch-ood fits in torch's default grad mode
(TemperatureScaling's L-BFGS needs it) and is called on each split as one tensor (its
``predict_logits`` / ``predict_features`` / ``predict_feature_maps``) under
``torch.no_grad()`` (GradNorm: with gradients), except:

- DICE: in batches of 64 rows (it builds a (B, C, D) tensor: 0.5 GB per batch of 64);
- Mahalanobis / RMD (O(C N D^2): a (N, D) x (D, D) product per class), DICE and GradNorm
  (per-sample (C, D) gradients): only the first rows of id/test and of ood/near/novel are
  scored (see PEER_ROWS; one call each) and the score time is extrapolated linearly to all
  rows (marked ~);
- KNN, all three implementations (exact search is O(N_query x N_bank x D) and the
  same GEMM-bound brute force in each): the full 100k bank, but only the first ``--knn-rows``
  rows of id/test and of ood/near/novel are queried, and the score time is extrapolated
  linearly (marked ~); ``--knn-rows 0`` queries every row of the 5 splits.

Extrapolated peak memory is that of the subset run. AUROC (id/test vs ood/near/novel, ID
positive; pytorch-ood's outlier scores negated) is computed with scikit-learn on the rows
both sides scored, with the Spearman correlation of the two implementations' scores on those
rows. Time ratio = (peer fit + score) / (featstore fit + score), in wall seconds and in CPU
seconds (user + system of the child, all threads: steadier when the machine is shared; the
1-min load average is recorded and busy rows are marked). Memory ratio = featstore peak /
(peer peak + the peer job's inputs): pytorch-ood's detectors take tensors, so its job holds the
float32 arrays of every scored split and of its fit split in RAM (their size is computed from
the row counts, all rows even where only a subset was timed), while featstore streams them from
the store (its peak includes its read buffers). Output is Markdown on stdout; progress goes to
stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import peers
from benchmarks.machine import cpu_model, mem_total_gib

NUM_CLASSES = 1000
DIM = 2048
OOD_SPLITS = ("ood/near/novel", "ood/near/blend", "ood/far/sparse", "ood/far/noise")
SCORE_SPLITS = ("id/test", *OOD_SPLITS)
AUROC_ID, AUROC_OOD = "id/test", OOD_SPLITS[0]
AUROC_TOL = 0.5  # percentage points; larger differences are flagged
CHILD_TIMEOUT_S = 1800
KNN_ROWS = 2500  # rows of id/test and of the AUROC OOD split queried by exact KNN (0 = all)
# Peers scored on the first rows of id/test and of the AUROC OOD split only (time
# extrapolated): Mahalanobis/RMD do one (rows, D) x (D, D) product per class, so fewer rows
# per call would make their GEMMs less efficient than on whole splits.
PEER_ROWS = {"mds": 100, "rmds": 100, "dice": 500, "gradnorm": 250}
SUBSET_SPLITS = (AUROC_ID, AUROC_OOD)
APPROX_INDEX = "ivf_flat"  # the approximate KNN index timed against sklearn's exact search


@dataclass(frozen=True)
class Sizes:
    train: int
    val: int
    test: int
    ood: int

    def rows(self, split: str) -> int:
        if split == "id/train":
            return self.train
        if split == "id/val":
            return self.val
        if split == "id/test":
            return self.test
        return self.ood


FULL = Sizes(train=100_000, val=10_000, test=50_000, ood=10_000)
QUICK = Sizes(train=10_000, val=1_000, test=5_000, ood=1_000)

# featstore scorer -> its pytorch-ood 0.4 peer (label, input kind, fit data): benchmarks/peers.py
PEERS = peers.PEERS


# --------------------------------------------------------------------------- memory
def _status_kb(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {key}")


def _mem_baseline() -> tuple[float, bool]:
    """(VmRSS in MiB, whether the high-water mark could be reset to it)."""
    gc.collect()
    rss = _status_kb("VmRSS") / 1024
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        reset = True
    except OSError:
        reset = False
    return rss, reset


def _cpu_s() -> float:
    """User + system CPU seconds of this process (all threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Clock:
    """Wall and CPU seconds of the phases of one measurement, and the load around them."""

    def __init__(self) -> None:
        self.marks = [(time.perf_counter(), _cpu_s())]
        self.load = [os.getloadavg()[0]]

    def mark(self) -> None:
        self.marks.append((time.perf_counter(), _cpu_s()))
        self.load.append(os.getloadavg()[0])

    def result(self) -> dict[str, Any]:
        (w0, c0), (w1, c1), (w2, c2) = self.marks
        return {"fit_s": w1 - w0, "score_s": w2 - w1, "fit_cpu_s": c1 - c0,
                "score_cpu_s": c2 - c1, "load": max(self.load)}


def _mem_peak() -> float:
    """RSS high-water mark in MiB (VmHWM; ru_maxrss as a fallback)."""
    try:
        return _status_kb("VmHWM") / 1024
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- data
def _fill_features(rng: np.random.Generator, n: int, centres: Any, offset: np.ndarray,
                   scale: np.ndarray, noise: float = 1.0, block: int = 16384) -> np.ndarray:
    """ReLU(offset + centre + noise * scale * N(0, 1)) as float32, built in row blocks.

    `centres(lo, hi)` returns the (hi - lo, D) or (D,) pre-activation centres of rows lo..hi."""
    out = rng.standard_normal((n, DIM), dtype=np.float32)
    for lo in range(0, n, block):
        hi = min(lo + block, n)
        part = out[lo:hi]
        part *= scale * np.float32(noise)
        part += offset
        part += centres(lo, hi)
        np.maximum(part, 0.0, out=part)
    return out


def ncm_head(offset: np.ndarray, scale: np.ndarray, centres: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(W, b) float32: the nearest-class-mean classifier (LDA with isotropic covariance),
    scaled by 2, on the analytic class means of ReLU(N(offset + centre, scale^2))."""
    from scipy.special import ndtr

    m = (offset + centres).astype(np.float64)
    s = scale.astype(np.float64)
    z = m / s
    class_means = m * ndtr(z) + s * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    grand = class_means.mean(axis=0)
    dev = class_means - grand
    kappa = 2.0
    weight = (kappa * dev).astype(np.float32)
    bias = (kappa * (-(dev @ grand) - 0.5 * np.einsum("cd,cd->c", dev, dev))).astype(np.float32)
    return weight, bias


def generate(sizes: Sizes, seed: int) -> dict[str, Any]:
    """Head (W, b) and every split's features, logits and labels (see the module docstring)."""
    rng = np.random.default_rng(seed)
    offset = (rng.standard_normal(DIM, dtype=np.float32) * 0.3 + 0.2).astype(np.float32)
    scale = rng.permutation(1.0 / np.sqrt(1.0 + np.arange(DIM) / 128.0)).astype(np.float32)
    centres = rng.standard_normal((NUM_CLASSES, DIM), dtype=np.float32) * np.float32(0.05)
    weight, bias = ncm_head(offset, scale, centres)

    def labelled(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.permutation(np.arange(n) % NUM_CLASSES).astype(np.int64)
        return _fill_features(rng, n, lambda lo, hi: centres[y[lo:hi]], offset, scale), y

    splits: dict[str, dict[str, np.ndarray]] = {}
    for name, n in (("id/train", sizes.train), ("id/val", sizes.val), ("id/test", sizes.test)):
        x, y = labelled(n)
        splits[name] = {"features": x, "labels": y}
    n = sizes.ood
    novel = rng.standard_normal((NUM_CLASSES, DIM), dtype=np.float32) * np.float32(0.05)
    pick = rng.integers(0, NUM_CLASSES, n)
    pa, pb = rng.integers(0, NUM_CLASSES, n), rng.integers(0, NUM_CLASSES, n)
    ood_centres = {
        "ood/near/novel": lambda lo, hi: novel[pick[lo:hi]],
        "ood/near/blend": lambda lo, hi: 0.5 * (centres[pa[lo:hi]] + centres[pb[lo:hi]]),
        "ood/far/sparse": lambda lo, hi: (rng.standard_normal((hi - lo, DIM), dtype=np.float32)
                                          * np.float32(0.1) - np.float32(0.5)),
        "ood/far/noise": lambda lo, hi: np.float32(0.0),
    }
    for name in OOD_SPLITS:
        noise = 2.0 if name == "ood/far/noise" else 1.0
        x = _fill_features(rng, n, ood_centres[name], offset, scale, noise=noise)
        splits[name] = {"features": x, "labels": np.full(n, -1, dtype=np.int64)}
    for arrays in splits.values():
        arrays["logits"] = arrays["features"] @ weight.T + bias
    return {"head": (weight, bias), "splits": splits}


def write_warm_store(path: str, seed: int) -> None:
    """A tiny store (D = 32, C = 10; 10,000 id/train rows so that every default K fits) on
    which each featstore child runs its scorer once before timing."""
    from featstore import Store

    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((10, 32), dtype=np.float32)
    bias = rng.standard_normal(10, dtype=np.float32)
    splits = {}
    for name, n in (("id/train", 10_000), ("id/val", 500), ("id/test", 500),
                    ("ood/near/novel", 500)):
        x = np.maximum(rng.standard_normal((n, 32), dtype=np.float32), 0.0)
        splits[name] = {"features": x, "logits": x @ weight.T + bias,
                        "labels": (rng.integers(0, 10, n) if name.startswith("id/")
                                   else np.full(n, -1))}
    Store.from_arrays(path, head=(weight, bias), splits=splits)


def _child_generate(spec: dict[str, Any]) -> dict[str, Any]:
    from featstore import Store

    sizes = Sizes(**spec["sizes"])
    t0 = time.perf_counter()
    data = generate(sizes, spec["seed"])
    t_gen = time.perf_counter() - t0
    test = data["splits"]["id/test"]
    acc = float((test["logits"].argmax(axis=1) == test["labels"]).mean())
    zeros = float((data["splits"]["id/train"]["features"] == 0).mean())
    stores = {}
    for dtype, path in spec["stores"].items():
        t0 = time.perf_counter()
        Store.from_arrays(path, head=data["head"], splits=data["splits"], dtype=dtype,
                          provenance={"name": "synthetic-imagenet-shaped",
                                      "seed": spec["seed"]})
        size = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
        stores[dtype] = {"write_s": time.perf_counter() - t0, "bytes": size}
    return {"generate_s": t_gen, "id_acc": acc, "train_zero_frac": zeros, "stores": stores}


# --------------------------------------------------------------------------- featstore side
def _prefix_split(split: Any, rows: int) -> Any:
    """A view of a split's first `rows` rows (iter_chunks and num_rows honour it)."""
    from featstore.store.store import Split

    entry = dict(split.entry)
    entry["num_rows"] = min(int(rows), split.num_rows)
    return Split(split._store, entry)


def _warm_featstore(name: str = "", params: dict[str, Any] | None = None,
                    warm_store: str | None = None) -> None:
    """Import what scorers import lazily; then fit and score the scorer once on a tiny store
    (same dtype), so its Numba kernels are compiled or loaded from the cache, and its code
    paths imported, before the clock starts."""
    import faiss  # noqa: F401
    import scipy.linalg  # noqa: F401
    import scipy.optimize  # noqa: F401
    import sklearn.kernel_approximation  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import sklearn.preprocessing  # noqa: F401
    import sklearn.svm  # noqa: F401

    if name and warm_store:
        from featstore import Store
        from scorers import get_scorer

        tiny = Store.open(warm_store)
        # ViM's principal dimension is sized for the real store; the tiny one has D = 32
        warm_params = {k: v for k, v in (params or {}).items() if k != "dim"}
        get_scorer(name, **warm_params).fit(tiny).score(tiny.split("id/test"))


def _child_featstore(spec: dict[str, Any]) -> dict[str, Any]:
    from featstore import Store
    from scorers import get_scorer

    _warm_featstore(spec["scorer"], spec.get("params"), spec.get("warm_store"))
    store = Store.open(spec["store"])
    splits = [store.split(n) for n in _scored_splits(spec.get("rows"))]
    if spec.get("rows"):
        splits = [_prefix_split(s, spec["rows"]) for s in splits]
    scorer = get_scorer(spec["scorer"], **spec.get("params", {}))
    base, reset = _mem_baseline()
    clock = Clock()
    scorer.fit(store)
    clock.mark()
    scores = [scorer.score(s) for s in splits]
    clock.mark()
    peak = _mem_peak() - base
    return {**clock.result(), "peak_mb": peak, "hwm_reset": reset,
            "scored_rows": sum(s.num_rows for s in splits), "params": scorer.params,
            "diagnostics": scorer.diagnostics,
            "scores": {AUROC_ID: scores[0], AUROC_OOD: scores[1]}}


# --------------------------------------------------------------------------- pytorch-ood side
def _scored_splits(rows: int | None) -> tuple[str, ...]:
    """All score splits, or (id/test, the AUROC OOD split) when only a row subset is scored;
    either way the AUROC pair comes first."""
    return SUBSET_SPLITS if rows else SCORE_SPLITS


def _load(store: Any, split: str, field: str, rows: int | None = None) -> np.ndarray:
    sp = store.split(split)
    arr = sp.read(field, slice(0, rows) if rows else None)  # floats come back as float32
    return np.ascontiguousarray(arr)


def _child_peer(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from pytorch_ood import detector as pod

    from featstore import Store

    name, rows = spec["scorer"], spec.get("rows")
    peer = PEERS[name]
    label = peer.label
    store = Store.open(spec["store"])
    w_np, b_np = store.head
    head = torch.nn.Linear(DIM, NUM_CLASSES)
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(w_np.copy()))
        head.bias.copy_(torch.from_numpy(b_np.copy()))
    grad_needed = name == "gradnorm"
    head.requires_grad_(grad_needed)

    cache = spec.get("torch_cache")  # pytorch-ood's own on-disk cache (benchmarks.peer_cache)

    def fetch(split: str, field: str, rows: int | None = None) -> torch.Tensor:
        if cache:
            from benchmarks.peer_cache import load

            tensor = load(cache, split, field)
            return tensor[:rows] if rows else tensor
        return torch.from_numpy(_load(store, split, field, rows))

    rss_before_load = _status_kb("VmRSS") / 1024
    t_load, c_load = time.perf_counter(), _cpu_s()
    inputs: dict[str, torch.Tensor] = {}
    for split in _scored_splits(rows):
        inputs[split] = fetch(split, peer.kind, rows)
    fit_x = fit_y = None
    if peer.fit_on == "train":
        fit_x = fetch("id/train", "features")
        fit_y = fetch("id/train", "labels")
    elif peer.fit_on == "val":
        fit_x = fetch("id/val", "logits")
        fit_y = fetch("id/val", "labels")
    load_s, load_cpu_s = time.perf_counter() - t_load, _cpu_s() - c_load
    input_mb = sum(t.numel() * t.element_size() for t in inputs.values()) / 2**20
    if fit_x is not None:
        input_mb += (fit_x.numel() * fit_x.element_size() + fit_y.numel() * 8) / 2**20

    params: dict[str, Any] = {}
    if name == "nnguide":  # the bank featstore uses: ceil(1% of id/train), default_rng(0)
        from scorers.knn_index import subsample_rows

        params["bank_rows"] = torch.from_numpy(subsample_rows(fit_x.shape[0], 0.01, 0))

    # warm-up: first calls of the kernels used below (thread pools, allocator)
    with torch.no_grad():
        tiny = torch.rand(8, DIM)
        head(tiny).softmax(1).topk(2, dim=1)
        tiny.T @ tiny

    base, reset = _mem_baseline()
    clock = Clock()
    # construction is timed with the fit: ViM's constructor computes u = -pinv(W) b, which
    # featstore's fit computes too (the other detectors' constructors only store arguments)
    built = peers.build(name, pod, head, params)
    det, predict = built.det, built.predict
    if built.fit is not None:  # default grad mode (TemperatureScaling's L-BFGS needs gradients)
        built.fit(fit_x, fit_y)
    clock.mark()
    with torch.set_grad_enabled(grad_needed):
        outs = [predict(x).detach().double().numpy() for x in inputs.values()]
    clock.mark()
    peak = _mem_peak() - base
    extra = {}
    if name == "knn":
        extra["sklearn_algorithm"] = det.knn._fit_method
    # the whole job's peak: inputs loaded (from the cache or the store) plus fit and score
    job_peak = _mem_peak() - rss_before_load
    return {**clock.result(), "peak_mb": peak, "hwm_reset": reset, "job_peak_mb": job_peak,
            "scored_rows": sum(int(x.shape[0]) for x in inputs.values()),
            "input_mb": input_mb, "load_s": load_s, "load_cpu_s": load_cpu_s,
            "label": label, "extra": extra,
            "scores": {AUROC_ID: -outs[0], AUROC_OOD: -outs[1]}}


def _child_sklearn_knn(spec: dict[str, Any]) -> dict[str, Any]:
    from sklearn.neighbors import NearestNeighbors

    from featstore import Store

    def normalize(x: np.ndarray) -> np.ndarray:
        return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

    rows = spec.get("rows")
    store = Store.open(spec["store"])
    t0 = time.perf_counter()
    train = _load(store, "id/train", "features")
    queries = {s: _load(store, s, "features", rows) for s in _scored_splits(rows)}
    load_s = time.perf_counter() - t0
    input_mb = (train.nbytes + sum(q.nbytes for q in queries.values())) / 2**20
    base, reset = _mem_baseline()
    clock = Clock()
    nn = NearestNeighbors(n_neighbors=50, algorithm="brute", n_jobs=-1).fit(normalize(train))
    clock.mark()
    outs = [-nn.kneighbors(normalize(q), return_distance=True)[0][:, -1]
            for q in queries.values()]
    clock.mark()
    peak = _mem_peak() - base
    return {**clock.result(), "peak_mb": peak, "hwm_reset": reset, "load_s": load_s,
            "scored_rows": sum(q.shape[0] for q in queries.values()), "input_mb": input_mb,
            "label": "NearestNeighbors(brute, n_jobs=-1, K=50)",
            "scores": {AUROC_ID: outs[0].astype(np.float64),
                       AUROC_OOD: outs[1].astype(np.float64)}}


def _child(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    role = spec["role"]
    runner = {"generate": _child_generate, "featstore": _child_featstore, "peer": _child_peer,
              "sklearn_knn": _child_sklearn_knn}[role]
    res = runner(spec)
    out = Path(spec["out"])
    scores = res.pop("scores", {})
    for key, arr in scores.items():
        np.save(out.with_name(out.stem + "." + key.replace("/", "_") + ".npy"), arr)
    out.write_text(json.dumps(res, default=str))
    return 0


# --------------------------------------------------------------------------- parent
class Runner:
    """Runs child measurements in fresh interpreters and collects their results."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.count = 0

    def run(self, spec: dict[str, Any], what: str) -> dict[str, Any]:
        self.count += 1
        out = self.workdir / f"res{self.count:03d}.json"
        spec = {**spec, "out": str(out)}
        spec_path = self.workdir / f"spec{self.count:03d}.json"
        spec_path.write_text(json.dumps(spec))
        _progress(f"  {what} ...")
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "benchmarks.bench_scorers", "--child", str(spec_path)],
                capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                cwd=Path(__file__).resolve().parent.parent,
            )
        except subprocess.TimeoutExpired:
            _progress(f"  {what}: TIMEOUT after {CHILD_TIMEOUT_S} s")
            return {"error": f"timeout after {CHILD_TIMEOUT_S} s"}
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out.exists():
            lines = (proc.stderr or proc.stdout or "").strip().splitlines()
            last = lines[-1] if lines else f"exit status {proc.returncode}"
            _progress(f"  {what}: FAILED ({last})")
            if proc.stderr:
                _progress(proc.stderr[-3000:])
            return {"error": last[:200]}
        res = json.loads(out.read_text())
        res["scores"] = {}
        for key in (AUROC_ID, AUROC_OOD):
            p = out.with_name(out.stem + "." + key.replace("/", "_") + ".npy")
            if p.exists():
                res["scores"][key] = np.load(p)
        res["wall_s"] = wall
        _progress(f"  {what}: fit {res.get('fit_s', 0):.2f} s, score {res.get('score_s', 0):.2f}"
                  f" s, peak {res.get('peak_mb', 0):.0f} MB (child wall {wall:.0f} s)")
        return res


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _auroc(id_scores: np.ndarray, ood_scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    y = np.r_[np.ones(id_scores.size), np.zeros(ood_scores.size)]
    return 100.0 * float(roc_auc_score(y, np.r_[id_scores, ood_scores]))


def _version(*dists: str) -> str:
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def _fmt(x: float | None, digits: int = 2, approx: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return ("~" if approx else "") + f"{x:.{digits}f}"


def _scaled(res: dict[str, Any], total_rows: int) -> tuple[float, float, bool]:
    """(score wall s, score CPU s) for all `total_rows` rows, extrapolated linearly from a
    subset, and whether it was extrapolated."""
    factor = max(1.0, total_rows / int(res["scored_rows"]))
    return res["score_s"] * factor, res["score_cpu_s"] * factor, factor > 1.0


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


HIGH_LOAD = (os.cpu_count() or 1) + 1.0


def _row(name: str, fs: dict[str, Any], peer: dict[str, Any] | None, peer_label: str,
         total_rows: int, peer_inputs: float = 0.0) -> tuple[str, dict[str, Any]]:
    """One Markdown table row and its summary figures."""
    summary: dict[str, Any] = {"name": name}
    notes: list[str] = [peer_label]
    if "error" in fs:
        return f"| {name} | failed: {fs['error']} |" + " |" * 12, summary
    fs_score, fs_cpu, fs_approx = _scaled(fs, total_rows)
    fs_total, fs_cpu_total = fs["fit_s"] + fs_score, fs["fit_cpu_s"] + fs_cpu
    cells = [name, _fmt(fs["fit_s"]), _fmt(fs_score, approx=fs_approx), _fmt(fs["peak_mb"], 0)]
    fs_id, fs_ood = fs["scores"][AUROC_ID], fs["scores"][AUROC_OOD]
    if fs_approx:
        notes.append(f"featstore scored {fs['scored_rows']:,} of {total_rows:,} rows")
    loads = [fs["load"]]
    if peer is None or "error" in peer:
        cells += ["—"] * 7 if peer is None else [f"failed: {peer['error']}"] + [""] * 6
        cells += [_fmt(_auroc(fs_id, fs_ood)), "—"]
    else:
        loads.append(peer["load"])
        peer_score, peer_cpu, peer_approx = _scaled(peer, total_rows)
        peer_total, peer_cpu_total = peer["fit_s"] + peer_score, peer["fit_cpu_s"] + peer_cpu
        approx = fs_approx or peer_approx
        speed = peer_total / fs_total if fs_total > 0 else float("inf")
        speed_cpu = peer_cpu_total / fs_cpu_total if fs_cpu_total > 0 else float("inf")
        peer_job = peer["peak_mb"] + peer_inputs
        mem_ratio = fs["peak_mb"] / peer_job if peer_job > 0 else float("inf")
        cells += [_fmt(peer["fit_s"]), _fmt(peer_score, approx=peer_approx),
                  _fmt(peer["peak_mb"], 0), _fmt(peer_job, 0),
                  _fmt(speed, 1, approx=approx) + "x",
                  _fmt(speed_cpu, 1, approx=approx) + "x", _fmt(mem_ratio, 2)]
        p_id, p_ood = peer["scores"][AUROC_ID], peer["scores"][AUROC_OOD]
        n_id, n_ood = min(fs_id.size, p_id.size), min(fs_ood.size, p_ood.size)
        a_fs = _auroc(fs_id[:n_id], fs_ood[:n_ood])
        a_peer = _auroc(p_id[:n_id], p_ood[:n_ood])
        rho = _spearman(np.r_[fs_id[:n_id], fs_ood[:n_ood]], np.r_[p_id[:n_id], p_ood[:n_ood]])
        cells += [_fmt(a_fs), _fmt(a_peer)]
        notes[0] += (f" (timed inputs {peer['input_mb']:.0f} MB in RAM, loading them took "
                     f"{peer['load_s']:.1f} s, not counted in its time)")
        if peer_approx:
            notes.append(f"peer scored {peer['scored_rows']:,} of {total_rows:,} rows")
        if n_id < fs_id.size or n_ood < fs_ood.size:
            notes.append(f"AUROC on {n_id:,} + {n_ood:,} rows")
        notes.append("Spearman rho of the two scores " + (
            "1 (same ranking)" if rho == 1.0 else
            f"1 - {1 - rho:.1e}" if rho > 0.9999 else f"{rho:.4f}"))
        agree = abs(a_fs - a_peer) <= AUROC_TOL
        if not agree:
            notes.append(f"AUROC differs by {a_fs - a_peer:+.2f}")
        goal = speed >= 3.0 and mem_ratio <= 1.0
        notes.append("goal met" if goal else "goal NOT met")
        summary.update(fs_total=fs_total, peer_total=peer_total, speed=speed,
                       speed_cpu=speed_cpu, mem_ratio=mem_ratio, goal=goal, agree=agree,
                       d_auroc=a_fs - a_peer, rho=rho)
    if max(loads) > HIGH_LOAD:
        notes.append(f"machine busy: 1-min load average up to {max(loads):.1f}")
    summary["load"] = max(loads)
    return "| " + " | ".join(cells + ["; ".join(notes)]) + " |", summary


def peer_inputs_mb(name: str, sizes: Sizes) -> float:
    """MiB of float32 inputs the peer's whole job holds in RAM: the scored splits' arrays of
    its input kind (all rows, even when only a subset was timed) plus its fit arrays."""
    kind, fit_on = PEERS[name].kind, PEERS[name].fit_on
    row = {"features": DIM, "logits": NUM_CLASSES}[kind] * 4
    total = sum(sizes.rows(s) for s in SCORE_SPLITS) * row
    if fit_on == "train":
        total += sizes.train * (DIM * 4 + 8)
    elif fit_on == "val":
        total += sizes.val * (NUM_CLASSES * 4 + 8)
    return total / 2**20


def _applicable(only: set[str] | None) -> tuple[list[str], list[str]]:
    from scorers import list_scorers
    from scorers.needs import Needs

    run, skipped = [], []
    for info in list_scorers():
        name = info["name"]
        if only is not None and name not in only:
            continue
        extras = [f"extra:{n}" for n in Needs.parse(info["needs"]).extras]
        if extras:
            skipped.append(f"`{name}` (needs {', '.join(extras)}; the stores hold no extras)")
            continue
        run.append(name)
    return run, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer rows (a fast check)")
    ap.add_argument("--dtype", choices=("float32", "float16", "both"), default="float32")
    ap.add_argument("--only", default="", help="comma-separated scorer names (default: all)")
    ap.add_argument("--knn-rows", type=int, default=KNN_ROWS,
                    help="rows of id/test and of the AUROC OOD split queried by the exact-KNN "
                         "runs, time extrapolated (0 = every row of the 5 splits)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--approx-knn", action="store_true",
                    help=f"also time KNN with index={APPROX_INDEX} against sklearn (with recall)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(args.child)

    t_start = time.perf_counter()
    sizes = QUICK if args.quick else FULL
    dtypes = ["float32", "float16"] if args.dtype == "both" else [args.dtype]
    only = {s.strip() for s in args.only.split(",") if s.strip()} or None
    names, skipped = _applicable(only)
    if only is not None and (unknown := only - set(names) - {s.split("`")[1] for s in skipped}):
        ap.error(f"unknown scorer(s): {', '.join(sorted(unknown))}")
    total_rows = sum(sizes.rows(s) for s in SCORE_SPLITS)
    knn_rows = args.knn_rows if 0 < args.knn_rows < sizes.test else 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still delete the stores
    tmp = Path(tempfile.mkdtemp(prefix="featstore-bench-scorers-", dir="/tmp"))
    status = 0
    try:
        runner = Runner(tmp)
        stores = {d: str(tmp / f"store_{d}") for d in dtypes}
        _progress(f"generating data and writing {len(dtypes)} store(s) under {tmp}")
        gen = runner.run({"role": "generate", "sizes": vars(sizes), "seed": args.seed,
                          "stores": stores}, "generate + Store.from_arrays")
        if "error" in gen:
            print(f"data generation failed: {gen['error']}")
            return 1
        _print_header(args, sizes, gen, dtypes, skipped, total_rows, knn_rows)
        warm_store = str(tmp / "warm_store")
        write_warm_store(warm_store, args.seed)
        summaries: dict[str, list[dict[str, Any]]] = {}
        for dtype in dtypes:
            store = stores[dtype]
            lines, summ = [], []
            for name in names:
                _progress(f"[{dtype}] {name}")
                rows = knn_rows if name == "knn" and knn_rows else None
                fs = runner.run({"role": "featstore", "scorer": name, "store": store,
                                 "rows": rows, "warm_store": warm_store}, "featstore")
                if name in PEERS:
                    peer_rows = rows or PEER_ROWS.get(name)
                    peer = runner.run({"role": "peer", "scorer": name, "store": store,
                                       "rows": peer_rows}, f"pytorch-ood {PEERS[name].label}")
                    label = f"pytorch-ood `{PEERS[name].label}`"
                    if name == "knn" and "extra" in peer:
                        algo = peer["extra"].get("sklearn_algorithm")
                        label += f" (sklearn NearestNeighbors, algorithm resolved to {algo!r})"
                else:
                    peer, label = None, "no pytorch-ood counterpart"
                line, s = _row(name, fs, peer, label, total_rows,
                               peer_inputs_mb(name, sizes) if name in PEERS else 0.0)
                lines.append(line)
                summ.append(s)
                if name == "knn":
                    sk = runner.run({"role": "sklearn_knn", "store": store, "rows": rows},
                                    "sklearn NearestNeighbors")
                    line, s = _row("knn vs sklearn", fs, sk,
                                   f"sklearn `{sk.get('label', 'NearestNeighbors')}`",
                                   total_rows, peer_inputs_mb("knn", sizes))
                    lines.append(line)
                    s["sklearn"] = True
                    summ.append(s)
                    if not args.approx_knn:
                        continue
                    # an approximate index (issue 8): time against sklearn's exact search,
                    # with the recall@K that fit measures against exact FAISS search
                    fa = runner.run({"role": "featstore", "scorer": name, "store": store,
                                     "rows": rows, "params": {"index": APPROX_INDEX},
                                     "warm_store": warm_store},
                                    f"featstore index={APPROX_INDEX}")
                    diag = fa.get("diagnostics", {})
                    recall = (f"recall@{diag['recall_k']} {diag['recall_at_k']:.3f} on "
                              f"{diag['recall_queries']} {diag['recall_split']} rows"
                              if "recall_at_k" in diag else "no recall reported")
                    line, s = _row(f"knn index={APPROX_INDEX} vs sklearn", fa, sk,
                                   f"sklearn `{sk.get('label', 'NearestNeighbors')}`; "
                                   f"featstore {recall}", total_rows,
                                   peer_inputs_mb("knn", sizes))
                    lines.append(line)
                    s["sklearn"] = True
                    summ.append(s)
            summaries[dtype] = summ
            _print_table(dtype, lines)
        _print_summary(summaries)
        print()
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"Total wall time of this run (generation, all children): "
              f"{(time.perf_counter() - t_start) / 60:.1f} min; CPU time of all children "
              f"(imports and data loading included): {(ru.ru_utime + ru.ru_stime) / 60:.1f} min.")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return status


def _print_header(args: argparse.Namespace, sizes: Sizes, gen: dict[str, Any],
                  dtypes: list[str], skipped: list[str], total_rows: int, knn_rows: int) -> None:
    argv = " ".join(a for a in (sys.argv[1:] if args is not None else []))
    cmd = ("python -m benchmarks.bench_scorers " + argv).rstrip()
    faiss_v = _version("faiss-gpu", "faiss-cpu", "faiss")
    print("### Scorers: featstore vs pytorch-ood 0.4 (and scikit-learn for KNN)")
    print()
    print(f"- date: {_dt.date.today().isoformat()}")
    print(f"- command: `{cmd}`")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, "
          f"{mem_total_gib()}; {platform.platform()}")
    print(f"- software: Python {platform.python_version()}, featstore {_version('featstore')}, "
          f"pytorch-ood {_version('pytorch-ood', 'pytorch_ood')}, torch {_version('torch')}, "
          f"faiss {faiss_v}, NumPy {_version('numpy')}, SciPy {_version('scipy')}, "
          f"scikit-learn {_version('scikit-learn')}, Numba {_version('numba')}, "
          f"h5py {_version('h5py')}")
    print(f"- data (seed {args.seed}): D = {DIM}, C = {NUM_CLASSES}; id/train {sizes.train:,}, "
          f"id/val {sizes.val:,}, id/test {sizes.test:,}, 4 OOD splits x {sizes.ood:,} "
          f"({', '.join(OOD_SPLITS)}); ID top-1 on id/test {100 * gen['id_acc']:.1f}%, "
          f"{100 * gen['train_zero_frac']:.0f}% zeros in id/train features; generated in "
          f"{gen['generate_s']:.1f} s")
    for dtype in dtypes:
        st = gen["stores"][dtype]
        print(f"- store {dtype}: {st['bytes'] / 2**20:,.0f} MiB, written by "
              f"`Store.from_arrays` in {st['write_s']:.1f} s (temporary, deleted at the end)")
    print(f"- timed: fit once (on the scorer's fit split), then score once on id/test + 4 OOD "
          f"splits = {total_rows:,} rows; seconds are wall time of one run each; speed-up = "
          f"peer (fit + score) / featstore (fit + score) in wall time, and in CPU seconds "
          f"(user + system, all threads); `~` = extrapolated linearly from the rows scored "
          f"(see notes)")
    queries = min(knn_rows, sizes.test) + min(knn_rows, sizes.ood)
    knn_txt = (f"the first {knn_rows:,} rows of id/test and of {AUROC_OOD} ({queries:,} "
               f"queries) against the full {sizes.train:,}-row bank, score time x "
               f"{total_rows / queries:.1f}" if knn_rows else "every row of the 5 splits")
    print(f"- exact KNN (featstore, pytorch-ood and sklearn alike) queries {knn_txt}")
    print("- peak MB: RSS high-water mark (VmHWM, reset via /proc/self/clear_refs) minus VmRSS "
          "just before fit, in a fresh child process per (implementation, scorer): memory the "
          "method adds beyond imports and inputs. featstore's inputs stay on disk (it reads "
          "chunks); pytorch-ood's inputs are float32 tensors already in RAM. \"peer job MB\" = "
          "peer peak MB + the float32 inputs its whole job holds (fit split + all scored rows); "
          "memory ratio = featstore peak MB / peer job MB")
    print("- AUROC: id/test vs ood/near/novel in %, ID positive, on the rows both sides "
          f"scored; differences above {AUROC_TOL} points are flagged")
    print("- goal (issue 3): time ratio >= 3x at memory ratio <= 1 per scorer; KNN >= 10x "
          "sklearn. `ood_metrics` vs scikit-learn on 10M scores: see "
          "`python -m benchmarks.bench_metrics`")
    if skipped:
        print(f"- skipped: {'; '.join(skipped)}")
    sys.stdout.flush()


def _print_table(dtype: str, lines: list[str]) -> None:
    print()
    print(f"#### {dtype} store")
    print()
    print("| scorer | featstore fit s | featstore score s | featstore peak MB | pytorch-ood fit s"
          " | score s | peak MB | peer job MB | speed-up | speed-up (CPU s) | memory ratio | "
          "AUROC featstore | AUROC peer | notes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for line in lines:
        print(line)
    sys.stdout.flush()


def _print_summary(summaries: dict[str, list[dict[str, Any]]]) -> None:
    print()
    print("#### Summary")
    print()
    for dtype, summ in summaries.items():
        peers = [s for s in summ if "speed" in s and not s.get("sklearn")]
        met = [s["name"] for s in peers if s["goal"]]
        slow = [f"{s['name']} ({s['speed']:.1f}x wall, {s['speed_cpu']:.1f}x CPU)"
                for s in peers if s["speed"] < 3.0]
        heavy = [f"{s['name']} ({s['mem_ratio']:.2f})" for s in peers if s["mem_ratio"] > 1.0]
        disagree = [f"{s['name']} ({s['d_auroc']:+.2f})" for s in peers if not s["agree"]]
        print(f"- {dtype}: goal met by {len(met)} of {len(peers)} scorers with a pytorch-ood "
              f"counterpart. Below 3x: {', '.join(slow) or 'none'}. More memory than the "
              f"peer: {', '.join(heavy) or 'none'}. AUROC differences > {AUROC_TOL}: "
              f"{', '.join(disagree) or 'none'}.")
        for s in summ:
            if s.get("sklearn") and "speed" in s:
                verdict = "met" if s["speed"] >= 10.0 else "NOT met"
                print(f"- {dtype}: {s['name']} NearestNeighbors: {s['speed']:.1f}x wall, "
                      f"{s['speed_cpu']:.1f}x CPU (goal 10x {verdict}), memory ratio "
                      f"{s['mem_ratio']:.2f}")
        loads = [s["load"] for s in summ if "load" in s]
        if loads:
            print(f"- {dtype}: 1-min load average during the measurements {min(loads):.1f} to "
                  f"{max(loads):.1f} on {os.cpu_count()} CPUs (the machine is shared; rows "
                  f"measured above {HIGH_LOAD:.0f} are marked busy, their wall times are "
                  f"inflated and the CPU-time ratio is the steadier figure)")


if __name__ == "__main__":
    raise SystemExit(main())
