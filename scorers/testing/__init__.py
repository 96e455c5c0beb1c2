"""The scorer contract as a public check: `check_scorer(MyScorer)` runs on your scorer the
checks that featstore's own contract suite (tests/scorers/test_contract.py) runs on every
built-in, and raises `ContractError` (an AssertionError) with a readable message naming the
check, the scorer and what to fix.

The checks (each also a function of its own, which the suite calls per built-in):
1. `check_module`: no torch import; for featstore's own scorers only (the house style of
   tests/scorers/test_contract.py, not the contract a user's scorer must meet), the module
   docstring names the paper's first author and states the formula as implemented (the
   phrase "as implemented" and a `score = ...` line);
2. `check_unknown_parameter`: an unknown parameter is a UsageError naming every valid one;
3. `check_score_before_fit`: `score` / `score_grid` before `fit` say to call fit;
4. `check_sign`: higher = more in-distribution: AUROC (ID positive) of id/test against an OOD
   split that every sensible scorer separates is > 50;
5. `check_grid`: `score_grid` over the default grid (clamped to the store by
   `scorers.adapt.adapt_grid`) equals a separate construct / fit / score per setting, bit for
   bit unless `grid_rtol` is given: |grid - single| <= grid_rtol * (|single| + max |single|);
6. `check_threads`: fit + score with 1 and with 3 threads in every pool (FEATSTORE_THREADS,
   BLAS, Numba, FAISS), in 16-row chunks, equal bit for bit;
7. `check_float16`: the same data stored as float16 scores within `FLOAT16_TOL` of the
   score range of the float32 store (a built-in whose score jumps by design where a value
   crosses a bin edge: its own tolerance and reason in `BUILTIN_FLOAT16_TOL`).

The stores are `scorers.testing.stores.contract_stores` (tiny, real HDF5, written to a
temporary folder); a scorer runs on the first one that meets its `needs`.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import StoreLike

from ..adapt import adapt_grid, fit_defaults
from ..base import Scorer
from ..metrics import ood_metrics
from ..registry import BUILTIN
from ..skipping import unsupported_reason
from .stores import ID_SPLIT, OOD_SPLIT, SCORED, contract_stores

# float16 stores: a score moves by at most this share of the float32 scores' range
FLOAT16_TOL = 1e-2
# built-ins whose score is discontinuous in a feature value by design, so that a float16
# rounding of one entry moves the score by a jump, not by a rounding error: (tolerance, why)
BUILTIN_FLOAT16_TOL: dict[str, tuple[float, str]] = {
    "optfs": (0.05, "a piecewise-constant shaping: an entry that float16 rounding moves across "
                    "a bin edge is multiplied by the neighbouring bin's theta (measured "
                    "2.1e-2 of the score range on the contract store)"),
}
# built-ins whose score_grid shares float work across settings, or computes a setting through
# a BLAS product of another shape than a separate fit does: (rtol, why), the check being
# |grid - single| <= rtol * (|single| + max |single|). Every other built-in is bit for bit:
# its grid runs each setting through the same operations on arrays of the same shapes, which
# gives the same bits whatever BLAS kernel the CPU selects (a BLAS library may pick another
# kernel, and summation order, for another shape).
BUILTIN_GRID_RTOL: dict[str, tuple[float, str]] = {
    "react": (1e-10, "the energies of every clip threshold come from one pass of sparse band "
                     "sums above the lowest clip value (scorers/kernels/bands.py)"),
    "dice": (1e-10, "the masked heads of a chain of percentiles are cumulative band sums of "
                    "the contribution matrix (scorers/kernels/bands.py), not one mask each"),
    "oodl": (1e-12, "the kernel rows of a block of query rows are one float64 GEMM against the "
                    "union of the support vectors of every nu (a separate fit: against its "
                    "own), in blocks sized by that union; BLAS may round the same entry "
                    "differently for another shape (1.4e-17 with OpenBLAS's SkylakeX "
                    "kernels; the decision values are O(1e-2..1e2))"),
    "vim": (1e-6, "a grid's residual norms are segment sums of ONE projection onto "
                  "V[:, min(dims):] (float32 by default), a separate fit's the sum of its own "
                  "onto V[:, dim:] (scorers/kernels/subspace.py; DESIGN §5 precision: "
                  "GRID_RTOL, measured <= 2e-7)"),
}
# built-ins that need parameters making the determinism check do real threaded work
BUILTIN_THREAD_PARAMS = {"nnguide": {"alpha": 0.1, "K": 5}}

Stores = Mapping[str, Mapping[str, StoreLike]]


class ContractError(AssertionError):
    """A scorer broke the contract: the message names the check, the scorer and the fix."""


def _fail(cls: type[Scorer], check: str, message: str) -> ContractError:
    return ContractError(f"check_scorer({cls.__name__}, name {cls.name!r}): {check}: {message}")


def store_for(stores: Mapping[str, StoreLike], cls: type[Scorer]) -> StoreLike:
    """The first store that has what `cls` needs; ContractError naming each store's reason."""
    reasons = []
    for name, store in stores.items():
        why = unsupported_reason(store, cls)
        if why is None:
            return store
        reasons.append(f"{name}: {why}")
    raise _fail(cls, "needs", f"no contract store supports it ({'; '.join(reasons)})")


def contract_scorer(cls: type[Scorer], store: StoreLike, **params: Any) -> Scorer:
    """`cls` with its defaults clamped to `store` (`scorers.adapt.fit_defaults`) plus
    `params`, unfitted, reading 16-row chunks."""
    used, _ = fit_defaults(cls(**params), params, store)
    scorer = cls(**used)
    scorer.chunk_rows = 16
    return scorer


# --------------------------------------------------------------------------- 1-3
def check_module(cls: type[Scorer], style: bool | None = None) -> None:
    """No torch import; with `style` (default: for a built-in only), the docstring names the
    paper's first author and states the formula as implemented."""
    if style is None:
        style = BUILTIN.get(cls.name) is cls
    module = sys.modules[cls.__module__]
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError) as exc:
        if not style:
            return  # a class without readable source (a notebook's): nothing to inspect
        raise _fail(cls, "module", f"cannot read the source of {cls.__module__} ({exc})") from None
    _check_no_torch(cls, tree)
    if style:
        _check_docstring(cls, tree)


def _check_docstring(cls: type[Scorer], tree: ast.Module) -> None:
    """The house style of featstore's own scorers: author and formula in the docstring."""
    doc = " ".join((ast.get_docstring(tree) or "").split())
    paper = str(cls.paper).strip()
    if not paper:
        raise _fail(cls, "module", "the class attribute `paper` is empty")
    first_author = re.split(r"[\s,.&]", paper)[0]
    if first_author not in doc:
        raise _fail(cls, "module", f"the docstring of {cls.__module__} does not name the "
                                   f"paper's first author {first_author!r} ({paper})")
    if "as implemented" not in doc.lower() or not re.search(r"\bscore(\(x\))?\s*=\s*\S", doc):
        raise _fail(cls, "module", f"the docstring of {cls.__module__} must state the formula "
                                   "as implemented: the phrase 'as implemented' and a line "
                                   "`score = ...` or `score(x) = ...`")


def _check_no_torch(cls: type[Scorer], tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""])
        if any(n.split(".")[0] == "torch" for n in names):
            raise _fail(cls, "module", f"{cls.__module__} imports torch (line {node.lineno}); "
                                       "scorers run on NumPy/SciPy/FAISS only")


def check_unknown_parameter(cls: type[Scorer]) -> None:
    """`cls(bogus_param=1)` is a UsageError naming it and every valid parameter."""
    valid = ", ".join(sorted(cls.defaults)) or "none"
    want = f"scorer {cls.name!r}: unknown parameter 'bogus_param' (valid: {valid})"
    try:
        cls(bogus_param=1)
    except UsageError as exc:
        if str(exc) != want:
            raise _fail(cls, "unknown parameter", f"message {str(exc)!r}, expected {want!r} "
                                                  "(keep Scorer.__init__'s check)") from None
        return
    raise _fail(cls, "unknown parameter", "cls(bogus_param=1) raised nothing; call "
                                          "super().__init__(**params)")


def check_score_before_fit(cls: type[Scorer], store: StoreLike) -> None:
    """`score` and `score_grid` before `fit` are a FeatstoreError saying to call fit."""
    split = store.split(ID_SPLIT)
    for what in ("score", "score_grid"):
        try:
            getattr(cls(), what)(split)
        except FeatstoreError as exc:
            if "call fit(store) before" not in str(exc):
                raise _fail(cls, "score before fit", f"{what}: {exc}") from None
            continue
        raise _fail(cls, "score before fit", f"{what}(split) before fit(store) raised nothing")


# --------------------------------------------------------------------------- 4-5
def check_sign(cls: type[Scorer], store: StoreLike) -> float:
    """(N,) finite float64 scores; AUROC of id/test (positive) vs the OOD split > 50.
    Returns the AUROC (percent)."""
    scorer = contract_scorer(cls, store).fit(store)
    id_s, ood_s = (scorer.score(store.split(s)) for s in SCORED)
    rows = store.split(ID_SPLIT).num_rows
    if id_s.shape != (rows,) or not (np.isfinite(id_s).all() and np.isfinite(ood_s).all()):
        raise _fail(cls, "scores", f"expected ({rows},) finite float64 scores, got shape "
                                   f"{id_s.shape} with non-finite values")
    auroc = ood_metrics(id_s, ood_s, id_name=ID_SPLIT, ood_name=OOD_SPLIT)["auroc"]
    if not auroc > 50:
        raise _fail(cls, "sign", f"AUROC {auroc:.1f} <= 50 of {ID_SPLIT} (positive) against "
                                 f"{OOD_SPLIT}, which every sensible scorer separates: scores "
                                 "must be HIGHER for MORE in-distribution rows (is the sign "
                                 "flipped? return -distance, not distance)")
    return auroc


def check_grid(cls: type[Scorer], store: StoreLike, grid_rtol: float = 0.0) -> int:
    """score_grid over the default grid equals a separate fit per setting (bit for bit, or to
    `grid_rtol` relative). Returns the number of settings compared."""
    scorer = contract_scorer(cls, store).fit(store)
    settings, _ = adapt_grid(scorer, cls.grid, (), store)
    clamped = {k: list(dict.fromkeys(s[k] for s in settings)) for k in settings[0]}
    count = 0
    for split in SCORED:
        try:
            results = scorer.score_grid(store.split(split))
        except UsageError:
            results = scorer.score_grid(store.split(split), clamped)
        if not results or len({repr(s) for s, _ in results}) != len(results):
            raise _fail(cls, "grid", "score_grid returned no or repeated settings")
        for setting, got in results:
            alone = contract_scorer(cls, store, **{**scorer.params, **setting}).fit(store)
            want = alone.score(store.split(split))
            scale = float(np.max(np.abs(want), initial=0.0))
            if got.shape != want.shape or not np.all(
                    np.abs(got - want) <= grid_rtol * (np.abs(want) + scale)):
                worst = float(np.max(np.abs(got - want), initial=0.0)) \
                    if got.shape == want.shape else float("inf")
                raise _fail(cls, "grid", f"score_grid's setting {setting} on {split} differs "
                                         f"from a separate fit by up to {worst:.3g} (allowed: "
                                         f"{grid_rtol:g} relative): _score_grid must give "
                                         "each setting the scores of fit + score with it")
            count += 1
    return count


# --------------------------------------------------------------------------- 6-7
@contextmanager
def threads(count: int) -> Iterator[None]:
    """Every thread pool the scorers use limited to `count` (Numba to its maximum if lower)."""
    import faiss  # lazy: FAISS loads its OpenMP runtime; only this check needs it here
    import numba
    from threadpoolctl import threadpool_limits

    numba_before = numba.get_num_threads()
    numba_max = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set at import
    env_before = os.environ.get("FEATSTORE_THREADS")
    os.environ["FEATSTORE_THREADS"] = str(count)
    numba.set_num_threads(min(count, numba_max))
    faiss.omp_set_num_threads(count)
    try:
        with threadpool_limits(limits=count):
            yield
    finally:
        numba.set_num_threads(numba_before)
        faiss.omp_set_num_threads(numba_max)
        if env_before is None:
            os.environ.pop("FEATSTORE_THREADS", None)
        else:
            os.environ["FEATSTORE_THREADS"] = env_before


def check_threads(cls: type[Scorer], store: StoreLike,
                  params: Mapping[str, Any] | None = None) -> None:
    """Scores with 1 and with 3 threads everywhere, in 16-row chunks, equal bit for bit.

    Why bit for bit holds on every CPU for the built-ins: scoring runs its BLAS products on one
    thread in row blocks whose sizes depend on the shapes only (`scorers.rowmap`), the worker
    threads only decide which block runs where; Numba kernels compute each row alone; FAISS's
    OpenMP splits the queries, each searched alone. The fits' BLAS/LAPACK calls on the
    contract stores (D <= 48) are below OpenBLAS's multithreading thresholds."""
    runs = []
    for count in (1, 3):
        with threads(count):
            scorer = contract_scorer(cls, store, **dict(params or {})).fit(store)
            runs.append([scorer.score(store.split(s)) for s in SCORED])
    for split, one, three in zip(SCORED, *runs, strict=True):
        if not np.array_equal(one, three):
            raise _fail(cls, "threads", f"scores of {split} differ between 1 and 3 threads "
                                        "(a reduction whose order depends on the thread "
                                        "count?)")


def check_float16(cls: type[Scorer], s32: StoreLike, s16: StoreLike) -> float:
    """|s16 - s32| <= FLOAT16_TOL * (range of the float32 scores); returns the worst share."""
    a = contract_scorer(cls, s32).fit(s32)
    b = contract_scorer(cls, s16, **{k: v for k, v in a.params.items()
                                     if k in a.defaults}).fit(s16)
    x32 = {split: a.score(s32.split(split)) for split in SCORED}
    spread = float(np.ptp(np.concatenate(list(x32.values())))) or 1.0
    tol = BUILTIN_FLOAT16_TOL.get(cls.name, (FLOAT16_TOL, ""))[0] if cls.name in BUILTIN \
        else FLOAT16_TOL
    worst = 0.0
    for split in SCORED:
        share = float(np.max(np.abs(b.score(s16.split(split)) - x32[split]))) / spread
        worst = max(worst, share)
        if share > tol:
            raise _fail(cls, "float16", f"{split}: the float16 store's scores differ by "
                                        f"{share:.2e} of the score range (allowed "
                                        f"{tol:g}); cast to float32/64 before sums")
    return worst


# --------------------------------------------------------------------------- all
def check_scorer(cls: type[Scorer] | Scorer, *, grid_rtol: float | None = None,
                 thread_params: Mapping[str, Any] | None = None,
                 stores: Stores | None = None) -> dict[str, Any]:
    """Run every contract check on a Scorer subclass (or an instance's class); raise
    ContractError on the first failure. `grid_rtol`: the relative tolerance of check 5
    (default 0, bit for bit; built-ins: `BUILTIN_GRID_RTOL`). `stores`: {"float32": {...},
    "float16": {...}} as `contract_stores` builds them (default: built in a temporary
    folder). Returns what was measured: {"auroc", "grid_settings", "float16_share"}."""
    cls = type(cls) if isinstance(cls, Scorer) else cls
    if not (isinstance(cls, type) and issubclass(cls, Scorer)):
        raise ContractError(f"check_scorer: {cls!r} is not a scorers.base.Scorer subclass")
    if grid_rtol is None:
        grid_rtol = BUILTIN_GRID_RTOL.get(cls.name, (0.0, ""))[0] if cls.name in BUILTIN \
            else 0.0
    if thread_params is None:
        thread_params = BUILTIN_THREAD_PARAMS.get(cls.name, {}) if cls.name in BUILTIN else {}
    if stores is None:
        with tempfile.TemporaryDirectory(prefix="featstore-contract-") as root:
            return check_scorer(cls, grid_rtol=grid_rtol, thread_params=thread_params,
                                stores=contract_stores(root))
    _contract_step(cls, "module", lambda: check_module(cls))
    _contract_step(cls, "unknown parameter", lambda: check_unknown_parameter(cls))
    s32 = store_for(stores["float32"], cls)
    kind = next(k for k, v in stores["float32"].items() if v is s32)
    _contract_step(cls, "score before fit", lambda: check_score_before_fit(cls, s32))
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("auroc", lambda: check_sign(cls, s32)),
        ("grid_settings", lambda: check_grid(cls, s32, grid_rtol)),
        ("threads", lambda: check_threads(cls, s32, thread_params)),
        ("float16_share", lambda: check_float16(cls, s32, stores["float16"][kind])),
    ]
    return {key: value for key, step in steps
            if (value := _contract_step(cls, key, step)) is not None}


def _contract_step(cls: type[Scorer], check: str, step: Callable[[], Any]) -> Any:
    """`step()`; anything it raises other than a ContractError (the scorer's fit or score
    raising, a FeatstoreError of the scorer's) is a ContractError naming the check."""
    try:
        return step()
    except ContractError:
        raise
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise _fail(cls, check, f"raised {type(exc).__name__}: {text[0] if text else ''}"
                    ) from exc


__all__ = ["ContractError", "check_float16", "check_grid", "check_module", "check_scorer",
           "check_score_before_fit", "check_sign", "check_threads", "check_unknown_parameter",
           "contract_scorer", "contract_stores", "store_for"]
