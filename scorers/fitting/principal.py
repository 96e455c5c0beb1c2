"""What ViM and Residual share above the kernels: the rule for the principal-space dimension
(`PrincipalScorer`, the base class of both) and the id/train passes of their fit.

    S       = (1/N) sum_{x in id/train} (x - u)(x - u)^T     `fit_principal_space`: one chunked
                                                             pass (float64 Gram sums, dsyrk),
                                                             then one eigendecomposition
    mean r  = mean_{id/train} ||(x - u) @ V[:, k:]||_2       `mean_residuals`: one pass for
                                                             every k asked for

(u = -pinv(W) @ b, V, lambda and the residual norms are `scorers.kernels.subspace`.)

`dim` (k): 1 <= dim < min(D, N) (N: the id/train rows) and dim <= rank(S) (dim < rank(S)
where a residual must remain: ViM, `PrincipalScorer.needs_residual`); default None = the ViM
paper's rule (`default_dim`).

Both scorers know rank(S) BEFORE their fit: `valid_ranges` is 1 <= dim <= min(D, N, rank(S))
- 1, so a default dim the id/train features cannot support (rank-deficient features: D = 63
at rank 60) is clamped to rank(S) - 1 by the one defaults rule (`scorers.adapt`, listed in
"adjusted", a warning from `Scorer.fit`) instead of failing the scorer, and a dim the user
gave above the limit (ViM: rank(S) - 1, Residual: rank(S)) is refused at fit, naming the rank
(`check_rank`). Residual's default is clamped to rank(S) - 1 too, not to rank(S): at dim =
rank(S) every id/train row's residual is 0, and so is every row's where the deficiency is the
features' own (dead units), a score of rounding noise; a dim = rank(S) the user gives is
kept. The space that tells the rank is the one the fit uses (`shared_space`: one id/train
pass and one eigendecomposition per store object, kept while the store object lives,
computed under the fit's thread limit, so the bits are the fit's whichever asks first).
"""

from __future__ import annotations

import numbers
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from featstore.errors import FeatstoreError, UsageError
from featstore.store.interfaces import StoreLike

from ..base import Scorer, ValidRange, fit_split_names, value_fields
from ..kernels.gram import GramSum
from ..kernels.precision import check_precision
from ..kernels.subspace import PrincipalSpace, head_origin
from ..threads import blas_threads, fit_work, threads_for

FIT_SPLIT = "id/train"


def default_dim(num_features: int) -> int:
    """The ViM paper's principal-space dimension for a D-dimensional feature space."""
    if num_features >= 2048:
        return 1000
    if num_features >= 768:
        return 512
    return num_features // 2


def resolve_dim(dim: Any, num_features: int) -> int:
    return default_dim(num_features) if dim is None else int(dim)


def feature_dim(store: StoreLike) -> int:
    """D, the head's input dimension."""
    return int(store.head[0].shape[1])


def check_dim(scorer_name: str, dim: Any, store: StoreLike | None = None) -> None:
    """`dim` is None (paper rule) or an integer with 1 <= dim < D."""
    if dim is None:
        if store is not None and default_dim(feature_dim(store)) < 1:
            raise UsageError(
                f"scorer {scorer_name!r}: feature dimension D={feature_dim(store)} is too small "
                "for a principal space (need D >= 2)"
            )
        if store is not None:
            check_dim_below_rows(scorer_name, default_dim(feature_dim(store)), store)
        return
    if isinstance(dim, bool) or not isinstance(dim, numbers.Integral):
        raise UsageError(
            f"scorer {scorer_name!r}: dim must be an integer with 1 <= dim < D or None "
            f"(got {dim!r})"
        )
    dim = int(dim)
    if store is None:
        if dim < 1:
            raise UsageError(
                f"scorer {scorer_name!r}: dim must satisfy 1 <= dim < D (got {dim})"
            )
        return
    d = feature_dim(store)
    if not 1 <= dim < d:
        raise UsageError(
            f"scorer {scorer_name!r}: dim must satisfy 1 <= dim < D = {d} (got {dim})"
        )
    check_dim_below_rows(scorer_name, dim, store)


def check_dim_below_rows(scorer_name: str, dim: int, store: StoreLike) -> None:
    """dim < N, the number of id/train rows: S is a sum of N rank-one terms, so its rank is
    at most N, and a principal space of dim >= N directions would hold arbitrary directions
    of S's null space (the residual, and ViM's alpha, would depend on LAPACK's choice of
    them). Checked from the split's size alone, before any fit."""
    if not store.has_split(FIT_SPLIT):
        return
    n = store.split(FIT_SPLIT).num_rows
    if dim >= n:
        d = feature_dim(store)
        raise UsageError(
            f"scorer {scorer_name!r}: dim={dim} is not below the {n} rows of {FIT_SPLIT!r} "
            f"that span the principal space; valid: 1 <= dim < min(D, N) = {min(d, n)}"
        )


def dim_range(store: StoreLike, rank: int | None = None) -> ValidRange:
    """dim's data-dependent range: 1 <= dim < min(D, N) (N = id/train rows; see
    `check_dim_below_rows`); shared by vim and residual. With `rank` (rank(S), known before
    the fit) and rank < min(D, N): 1 <= dim <= rank - 1, a residual left on id/train."""
    d = feature_dim(store)
    n = store.split(FIT_SPLIT).num_rows if store.has_split(FIT_SPLIT) else d
    if rank is not None and rank < min(d, n):
        return ValidRange(1, rank - 1, f"1 <= dim <= rank(S) - 1 = {rank - 1}: the "
                                       f"{FIT_SPLIT!r} features span {rank} directions about "
                                       f"u (numerical rank of S, D = {d}, N = {n}), and a "
                                       f"default dim keeps a residual on them (ViM's alpha "
                                       f"divides by it; at dim = rank every {FIT_SPLIT} "
                                       f"residual is 0)")
    degenerate = (f"; DEGENERATE at dim = N - 1 = {n - 1}: the principal space then holds "
                  f"every {FIT_SPLIT} row (their residuals ~0, far below any test row's); the "
                  f"store needs more {FIT_SPLIT} rows than D = {d}") if n <= d else ""
    return ValidRange(1, min(d, n) - 1, f"1 <= dim < min(D, N) = {min(d, n)} (D = {d} "
                                        f"features, N = {n} rows of {FIT_SPLIT!r}){degenerate}")


# store object -> {key: (space, mean max logit)}: ViM's fitted space, shared by the rank its
# range needs before the fit and the fit itself (module docstring)
_SPACES: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], tuple[PrincipalSpace, float | None]]]
_SPACES = weakref.WeakKeyDictionary()


def shared_space(scorer: Scorer, store: StoreLike, precision: str
                 ) -> tuple[PrincipalSpace, float | None]:
    """`fit_principal_space(scorer, store, mean_max_logit)` with products in `precision`
    (`mean_max_logit` where the scorer reads logits: ViM, not Residual), computed once per
    store object and key (id/train's manifest sha256 and row count, the model, the scorer's
    chunk rows, the precision, the logits pass and the fit's BLAS thread count, under which
    it runs: what decides its bits); later calls get the same object."""
    fields = value_fields(scorer)
    work = fit_work(store, fit_split_names(scorer), fields)
    with_logits = "logits" in fields
    key = (*_content_key(store), scorer.chunk_rows, precision, with_logits, threads_for(work))
    try:
        memo = _SPACES.setdefault(store, {})
    except TypeError:  # a store object that cannot be weakly referenced: no sharing
        memo = {}
    if key not in memo:
        with blas_threads(work):
            memo[key] = fit_principal_space(scorer, store, mean_max_logit=with_logits,
                                            precision=precision)
    return memo[key]


def fit_rank(scorer: Scorer, store: StoreLike, precision: str) -> int | None:
    """rank(S) of `store`'s id/train features about u (`shared_space`), or None where the fit
    itself must say what is wrong (no id/train rows, no head, NaN / inf in them)."""
    if not store.has_split(FIT_SPLIT) or store.manifest.get("has_head", True) is False:
        return None
    try:
        _ = store.head
    except FeatstoreError:  # no head (an ArrayStore without one): the fit names the need
        return None
    split = store.split(FIT_SPLIT)
    record: dict[str, Any] = getattr(split, "nonfinite_record", dict)()  # store.values
    if not split.num_rows or any(k in value_fields(scorer) for k in record):
        return None
    content = _content_key(store)
    try:
        known = _SPACES.get(store) or {}
    except TypeError:
        known = {}
    for key, (space, _) in known.items():  # any space of this content: the rank is an
        if key[:len(content)] == content:  # integer whatever the chunking or threads
            return space.rank
    space, _ = shared_space(scorer, store, precision)
    return space.rank


def _content_key(store: StoreLike) -> tuple[Any, ...]:
    """What identifies id/train's rows: the model, the manifest's sha256 and the row count."""
    entry = store.manifest.get("splits", {}).get(FIT_SPLIT, {})
    return (store.model_sha256, entry.get("sha256"), store.split(FIT_SPLIT).num_rows)


class PrincipalScorer(Scorer):
    """What vim and residual share about `dim`: the paper's default rule and its range, with
    rank(S) known before the fit (module docstring). `needs_residual` (ViM): a dim the user
    gives must also leave a residual, dim < rank(S) (Residual: dim <= rank(S))."""

    needs_residual: ClassVar[bool] = False

    def check_params(self, params: Mapping[str, Any], store: StoreLike | None = None) -> None:
        check_dim(self.name, params["dim"], store)
        check_precision(self.name, params["precision"])
        if store is not None:
            rank = fit_rank(self, store, params["precision"])
            if rank is not None:
                dim = resolve_dim(params["dim"], feature_dim(store))
                check_rank(self.name, dim, rank, self.needs_residual)

    def valid_ranges(self, params: Mapping[str, Any], store: StoreLike) -> dict[str, ValidRange]:
        return {"dim": dim_range(store, fit_rank(self, store, params["precision"]))}

    def resolve_default(self, param: str, value: Any, store: StoreLike) -> Any:
        return resolve_dim(value, feature_dim(store)) if param == "dim" else value

    def setting_dims(self, settings: list[dict[str, Any]], num_features: int) -> list[int]:
        """The principal dimension of each setting (this scorer's own dim where a setting
        has none), resolved by the paper rule where None."""
        return [resolve_dim({**self.params, **s}["dim"], num_features) for s in settings]


def check_spanned(space: PrincipalSpace, scorer_name: str, dim: int,
                  need_residual: bool) -> None:
    """`check_rank` with the rank of the fitted space."""
    check_rank(scorer_name, dim, space.rank, need_residual)


def check_rank(scorer_name: str, dim: int, rank: int, need_residual: bool) -> None:
    """The top-`dim` space is determined by S: dim <= rank(S); and, when the id/train rows
    must keep a residual (ViM's alpha), dim < rank(S). Beyond the rank the principal space
    would take arbitrary null-space directions of S (LAPACK's choice, not the data's)."""
    limit = rank - 1 if need_residual else rank
    if dim > limit:
        what = ("leaves no residual on" if need_residual
                else "is more than the principal directions spanned by")
        raise UsageError(
            f"scorer {scorer_name!r}: dim={dim} {what} {FIT_SPLIT!r} (its features span "
            f"{rank} directions about u: their covariance has numerical rank {rank}, "
            f"eigenvalues above max * D * eps); valid: 1 <= dim <= {limit}"
        )


def fit_principal_space(scorer: Scorer, store: StoreLike, mean_max_logit: bool = False,
                        precision: str | None = None) -> tuple[PrincipalSpace, float | None]:
    """One chunked pass over id/train for S about u (float64 Gram sums of the shifted rows)
    and, with `mean_max_logit`, the mean over id/train of max_j l_j (ViM's alpha numerator,
    None otherwise); then S's eigendecomposition. The products of the space follow
    `precision`, else the scorer's (float64 where it has none)."""
    weight, bias = store.head
    origin = head_origin(weight, bias)
    split = scorer.fit_split(store, FIT_SPLIT)
    fields = ("features", "logits") if mean_max_logit else ("features",)
    gram = GramSum(weight.shape[1])
    sum_max_logit = 0.0
    n = 0
    for _, arrays in scorer.chunks(split, *fields):
        xc = arrays[0].astype(np.float64)
        xc -= origin
        gram.add(xc)
        n += xc.shape[0]
        if mean_max_logit:
            sum_max_logit += float(arrays[1].max(axis=1).astype(np.float64).sum())
    if n == 0:
        raise FeatstoreError(f"scorer {scorer.name!r}: split {FIT_SPLIT!r} has no rows to fit")
    space = PrincipalSpace.from_upper(
        origin, gram.upper_matrix(n), n,
        precision if precision is not None else scorer.params.get("precision", "float64"))
    return space, (sum_max_logit / n if mean_max_logit else None)


def mean_residuals(scorer: Scorer, store: StoreLike, space: PrincipalSpace, dims: list[int]
                   ) -> dict[int, float]:
    """{k: mean_{id/train} ||(x - u) @ V[:, k:]||_2} for the distinct `dims`, from ONE chunked
    pass that projects each row onto V[:, min(dims):] (`PrincipalSpace.residual_sq`); {} for
    no dims (no pass)."""
    wanted = sorted(set(dims))
    if not wanted:
        return {}
    split = scorer.fit_split(store, FIT_SPLIT)
    sums = np.zeros(len(wanted), dtype=np.float64)
    for _, (x,) in scorer.chunks(split, "features"):
        sums += np.sqrt(space.residual_sq(x, wanted)).sum(axis=0)
    return {k: float(total) / space.num_rows for k, total in zip(wanted, sums, strict=True)}
