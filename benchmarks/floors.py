"""The machine floors of issue 19: what the hardware needs at least for a scorer's work, timed
on the same store as the scorer (benchmarks.bench_quick puts them side by side).

- Logit-only scorers: read the logits of every scored split from the store with ONE h5py call
  per split (``f["logits"][()]``, float32) plus one NumPy float32 pass of the scorer's core
  operation (`LOGIT_CORE`): ``max`` (mls), ``logsumexp`` (energy: max, exp(l - max), sum,
  log) or ``softmax`` (the others: max, exp(l - max), sum; their temperatures and the
  remaining per-row arithmetic are not counted). KL matching's core op also holds its one
  product of the size of the problem, p @ log(D).T over its K templates (an M x C x K GEMM,
  K = the classes predicted on id/val; 945 at the quick sizes): its floor is the softmax, the
  division p = e / s and that product as float32 sgemm with the row minimum, on an operand
  of the templates' shape (`kl_template_operand`, built untimed).
- GEMM-bound scorers: the store reads (one h5py call per array, float32) plus the scorer's
  dense products as float32 sgemm on those arrays in RAM (`GEMM_FLOORS`; shapes below with
  N = id/train rows, M = scored rows, D = features, C = classes, k = ViM's dim); the D x D
  eigendecompositions (and the C x C one of W W^T for ViM / Residual's origin) the fits also
  need are NOT part of this floor. They are timed separately in float64 (`FACTORIZATIONS`),
  since decision 2 of the issue keeps them in float64, so that a ratio above the floor can be
  split into "factorizations" and the rest.
  Operands of the products are arrays of the right shapes with ordinary values (a slice of the
  Gram matrix, say): a product's time does not depend on the values.

Every floor function takes a `FloorInputs` and returns nothing; it does the reads itself so
that the read is inside the timed region, like the scorer's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np


@dataclass(frozen=True)
class FloorInputs:
    train: Path            # id/train split file
    val: Path              # id/val split file
    scored: list[Path]     # the scored splits' files
    weight: np.ndarray     # (C, D) float32 head, already in RAM (model.h5 is tiny)
    bias: np.ndarray       # (C,) float32
    vim_dim: int           # ViM / Residual principal dimension k
    knn_k: int             # KNN's K
    nnguide_k: int         # NNGuide's K
    nnguide_bank: int      # NNGuide's bank rows
    react_percentile: float
    knn_scored: list[Path]  # the splits exact KNN queries (all scored splits, or a subset)
    knn_rows: int | None    # the first rows of each of them that KNN queries (None: all)
    kl_log_templates: np.ndarray | None = None  # (C, K) float32 KL-matching operand


def read(path: Path, field: str) -> np.ndarray:
    """One h5py call: the whole dataset `field` of a split file, as stored."""
    with h5py.File(path, "r") as f:
        return f[field][()]


# --------------------------------------------------------------------------- logit floors
def _max(logits: np.ndarray) -> None:
    logits.max(axis=1)


def _softmax(logits: np.ndarray) -> np.ndarray:
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    return e.sum(axis=1)


def _logsumexp(logits: np.ndarray) -> None:
    m = logits.max(axis=1)
    np.log(_softmax(logits)) + m


def _softmax_templates(logits: np.ndarray, log_templates: np.ndarray) -> None:
    """KL matching's core: p = softmax(l) (max, exp, sum, divide), then min over the K
    columns of p @ log(D).T (float32 sgemm, M x C x K)."""
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    e /= e.sum(axis=1, keepdims=True)
    (e @ log_templates).min(axis=1)


KL_CORE = "softmax + M C K sgemm"
CORE_OPS: dict[str, Callable[[np.ndarray], object]] = {
    "max": _max, "softmax": _softmax, "logsumexp": _logsumexp}
LOGIT_CORE = {"msp": "softmax", "mls": "max", "energy": "logsumexp", "odin": "softmax",
              "gen": "softmax", "entropy": "softmax", "kl_matching": KL_CORE,
              "temp_scaling": "softmax"}


def kl_template_operand(val: Path) -> np.ndarray:
    """A (C, K) float32 operand of KL matching's log-template shape: K = the number of
    classes argmax-predicted on id/val (one template each); values: logs of normalized
    positive rows (a product's time does not depend on the values)."""
    logits = read(val, "logits")
    k = max(1, int(np.unique(logits.argmax(axis=1)).size))
    d = np.random.default_rng(0).random((k, logits.shape[1])) + 1e-3
    return np.ascontiguousarray(np.log(d / d.sum(axis=1, keepdims=True)).T, dtype=np.float32)


def logit_floor(name: str, inputs: FloorInputs) -> None:
    """Read each scored split's logits with one h5py call and run the core op on them."""
    core = LOGIT_CORE[name]
    if core == KL_CORE:
        operand = inputs.kl_log_templates
        if operand is None:
            raise ValueError("kl_matching's floor needs FloorInputs.kl_log_templates")
        for path in inputs.scored:
            _softmax_templates(read(path, "logits"), operand)
        return
    op = CORE_OPS[core]
    for path in inputs.scored:
        op(read(path, "logits"))


# --------------------------------------------------------------------------- GEMM floors
def _gram(x: np.ndarray, float64: bool = False) -> np.ndarray:
    """x.T @ x: float32 sgemm (N x D -> D x D), or with `float64` the float64 dgemm of the rows
    widened (what the scorers' trust bar needs: a float32 Gram moved ViM's scores past 1e-5,
    scorers/kernels/precision.py), returned as float32 for the products after it."""
    if float64:
        w = x.astype(np.float64)
        return (w.T @ w).astype(np.float32)
    return x.T @ x


def _basis(gram: np.ndarray, cols: int) -> np.ndarray:
    """A (D, cols) float32 operand with the values of a scaled Gram slice."""
    g = gram[:, :cols]
    return np.ascontiguousarray(g / np.float32(max(float(np.abs(g).max()), 1e-30)))


def _scored(inputs: FloorInputs, field: str) -> list[np.ndarray]:
    return [read(p, field) for p in inputs.scored]


def floor_principal(inputs: FloorInputs, alpha: bool, gram64: bool = False) -> None:
    """ViM (alpha=True) / Residual: Gram of id/train (N D^2); projections onto the D - k
    residual columns: of id/train for alpha (N D (D - k)) and of every scored row
    (M D (D - k)). ViM also reads the logits (alpha's max-logit mean, the energy)."""
    train = read(inputs.train, "features")
    if alpha:
        read(inputs.train, "logits")
    basis = _basis(_gram(train, gram64), train.shape[1] - inputs.vim_dim)
    if alpha:
        train @ basis
    for x in _scored(inputs, "features"):
        x @ basis
    if alpha:
        _scored(inputs, "logits")


def floor_mahalanobis(inputs: FloorInputs, relative: bool, gram64: bool = False,
                      whiten64: bool = False) -> None:
    """MDS (relative=False) / RMDS: Gram of id/train (N D^2; RMDS twice: tied and global),
    whitening of the C class means (C D^2) and of every scored row (M D^2; RMDS twice), the
    class products (M D C). `whiten64`: the scored rows' whitening products in float64 dgemm
    (RMDS's trust floor: its score is a difference of two distances, and float32 whitening
    moved it by 2.3e-5, scorers/kernels/precision.py)."""
    train = read(inputs.train, "features")
    read(inputs.train, "labels")
    grams = [_gram(train, gram64) for _ in range(2 if relative else 1)]
    whiten = [_basis(g, g.shape[1]) for g in grams]
    if whiten64:
        whiten = [w.astype(np.float64) for w in whiten]
    num_classes = inputs.weight.shape[0]
    means = train[:num_classes]
    z_mu = (means @ whiten[0]).astype(np.float32)
    for x in _scored(inputs, "features"):
        x = x.astype(np.float64) if whiten64 else x
        z = x @ whiten[0]
        z.astype(np.float32, copy=False) @ z_mu.T
        if relative:
            x @ whiten[1]


def floor_fdbd(inputs: FloorInputs, gram64: bool = False) -> None:
    """fDBD: W W^T (C^2 D) for the boundary table (with `gram64` in float64 dgemm: the table
    ||w_c||^2 + ||w_j||^2 - 2 w_c . w_j cancels for close classes, so the scorer keeps it in
    float64); reads id/train features (their mean) and the scored features and logits."""
    read(inputs.train, "features")
    w = inputs.weight.astype(np.float64) if gram64 else inputs.weight
    w @ w.T
    _scored(inputs, "features")
    _scored(inputs, "logits")


def floor_rowdot(inputs: FloorInputs, train_fields: tuple[str, ...]) -> None:
    """NCI / SHE: no dense product; reads id/train's `train_fields` (NCI: features for the
    mean; SHE: features, labels and logits for the class sums), the scored features and
    logits, and one float32 row-wise dot per scored row with the predicted class's weight row
    (M D)."""
    for field in train_fields:
        read(inputs.train, field)
    for path in inputs.scored:
        x, logits = read(path, "features"), read(path, "logits")
        pred = logits.argmax(axis=1)
        np.einsum("nd,nd->n", x, inputs.weight[pred])


def _topk_of_products(queries: np.ndarray, bank: np.ndarray, k: int,
                      block: int = 2048) -> None:
    """queries @ bank.T (sgemm, in row blocks) and the k-th largest per row (partition)."""
    for lo in range(0, queries.shape[0], block):
        sims = queries[lo:lo + block] @ bank.T
        kk = min(k, sims.shape[1]) - 1
        np.partition(sims, sims.shape[1] - 1 - kk, axis=1)


def _normalized(x: np.ndarray) -> np.ndarray:
    return x / (np.sqrt(np.einsum("ij,ij->i", x, x))[:, None] + np.float32(1e-10))


def floor_knn(inputs: FloorInputs) -> None:
    """Exact KNN: normalize id/train and the scored rows, products of every scored row with
    every bank row (M N D, sgemm in blocks) and the K-th largest per row."""
    bank = _normalized(read(inputs.train, "features"))
    for path in inputs.knn_scored:
        with h5py.File(path, "r") as f:
            x = f["features"][:inputs.knn_rows] if inputs.knn_rows else f["features"][()]
        _topk_of_products(_normalized(x), bank, inputs.knn_k)


def floor_nnguide(inputs: FloorInputs) -> None:
    """NNGuide: a bank of `nnguide_bank` normalized id/train rows, products of every scored
    row with it (M B D) and the K-th largest; reads the logits (the energy)."""
    train = read(inputs.train, "features")
    read(inputs.train, "logits")
    bank = _normalized(train[:inputs.nnguide_bank])
    for path in inputs.scored:
        _topk_of_products(_normalized(read(path, "features")), bank, inputs.nnguide_k)
        read(path, "logits")


def floor_react(inputs: FloorInputs) -> None:
    """ReAct: the percentile of id/train's N D activations (np.partition, float32), then
    min(x, c) @ W.T (M D C, sgemm) for every scored row."""
    flat = read(inputs.train, "features").ravel()
    rank = int(round(inputs.react_percentile / 100.0 * (flat.size - 1)))
    clip = np.partition(flat, rank)[rank]
    for x in _scored(inputs, "features"):
        np.minimum(x, clip, out=x) @ inputs.weight.T


GEMM_FLOORS: dict[str, tuple[Callable[[FloorInputs], None], str]] = {
    "vim": (lambda i: floor_principal(i, alpha=True),
            "N D^2 + N D (D-k) + M D (D-k)"),
    "residual": (lambda i: floor_principal(i, alpha=False), "N D^2 + M D (D-k)"),
    "mds": (lambda i: floor_mahalanobis(i, relative=False), "N D^2 + C D^2 + M D^2 + M D C"),
    "rmds": (lambda i: floor_mahalanobis(i, relative=True),
             "2 N D^2 + C D^2 + 2 M D^2 + M D C"),
    "fdbd": (floor_fdbd, "C^2 D + reads"),
    "nci": (lambda i: floor_rowdot(i, ("features",)), "M D row dots + reads"),
    "she": (lambda i: floor_rowdot(i, ("features", "labels", "logits")),
            "M D row dots + reads"),
    "nnguide": (floor_nnguide, "M B D + top-K"),
    "react": (floor_react, "partition of N D + M D C"),
    "knn": (floor_knn, "M N D + top-K"),
}


# --------------------------------------------------------------------------- factorizations
# The same floors with the id/train Gram(s) as float64 dgemm: the precision the trust bar of
# issue 19 (scores within 1e-5 relative of the float64 reference) allows for these fits
# (docs/DESIGN.md section 5: a float32 covariance moved ViM by 2.8e-5); products after it float32,
# except RMDS's scored whitening products (float64: float32 moved its scores by 2.3e-5).
TRUST_FLOORS: dict[str, Callable[[FloorInputs], None]] = {
    "vim": lambda i: floor_principal(i, alpha=True, gram64=True),
    "residual": lambda i: floor_principal(i, alpha=False, gram64=True),
    "mds": lambda i: floor_mahalanobis(i, relative=False, gram64=True),
    "rmds": lambda i: floor_mahalanobis(i, relative=True, gram64=True, whiten64=True),
    "fdbd": lambda i: floor_fdbd(i, gram64=True),
}


def _eigh(dim: int, count: int) -> Callable[[FloorInputs], None]:
    """`count` float64 eigendecompositions of a D x D symmetric matrix (built untimed)."""
    a = np.random.default_rng(0).standard_normal((dim, dim))
    spd = a @ a.T

    def run(inputs: FloorInputs) -> None:
        for _ in range(count):
            np.linalg.eigh(spd)
    return run


def _head_pinv(inputs: FloorInputs) -> None:
    """pinv(W)'s factorization as the fit does it (`scorers.kernels.subspace.head_origin`):
    the float64 eigendecomposition of the C x C Gram W W^T."""
    w = inputs.weight.astype(np.float64)
    np.linalg.eigh(w @ w.T)


def factorizations(name: str, dim: int) -> Callable[[FloorInputs], None] | None:
    """The float64 D x D eigendecompositions (and ViM / Residual's eigendecomposition of
    W W^T for the origin) a scorer's fit does besides its products, or None."""
    count = {"vim": 1, "residual": 1, "mds": 1, "rmds": 2}.get(name)
    if count is None:
        return None
    eig = _eigh(dim, count)
    if name in ("vim", "residual"):
        return lambda i: (eig(i), _head_pinv(i))
    return eig
