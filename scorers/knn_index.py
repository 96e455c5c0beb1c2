"""A small FAISS wrapper for nearest-neighbour scorers (knn, nnguide, shift-degree code).

`build_index(bank, metric, kind, ...)` indexes a float32 bank (N, D):

- `exact` (default): `IndexFlatL2` / `IndexFlatIP`, brute force, the reference result. An
  inner-product search on the CPU at k >= N / 10 (NNGuide's bank at K = 100 of 100 rows)
  is a float32 sgemm + np.argpartition over the flat index's own vectors instead
  (`scorers.kernels.iptopk`): FAISS's per-query k-heaps cost more than the sgemm there.
- `ivf_flat`: `IndexIVFFlat`, an inverted file over `nlist` k-means cells (default
  `min(4 * sqrt(N), N // 39)`, at least 1: FAISS wants >= 39 training points per cell);
  a query visits `nprobe` cells (default `max(8, nlist // 16)`, at most `nlist`).
- `ivf_pq`: `IndexIVFPQ`, the same inverted file with product-quantized residuals: `pq_m`
  sub-quantizers (default: the largest divisor of D that is <= D // 8, i.e. sub-vectors of
  >= 8 dims: 256 bytes a row at D = 2048 against 8 KiB of float32) of `pq_nbits` bits each
  (default 8, lowered to floor(log2 N) for tiny banks). The codebooks are trained (FAISS's
  25 k-means iterations per sub-quantizer) on at most `train_points_per_list` points per
  code, as the coarse quantizer is: at FAISS's own 256 a sub-quantizer costs ~0.5 s.
  Searches are re-ranked exactly (`rerank_factor`, default 10: 10 k exact distances a
  query cost little beside the scan, and 4 stayed below recall 0.95 on near-isotropic
  64-dim data where 8 and 10 reached it): a search at k takes the
  `rerank_factor * k` best candidates by quantized distance from the inverted lists and
  returns the k best of them by exact distance, computed from a flat copy of the bank
  (`IndexRefine` over an `IndexFlat`), so the distances a scorer sees are exact (float32)
  and only the neighbour set is approximate. The flat copy is the bank's only full-precision
  copy (the index then holds the bank plus N * pq_m * pq_nbits / 8 bytes of codes); the
  scan of the probed lists reads the codes, not the vectors. `rerank_factor = 0` keeps the
  quantized distances (codes only, no flat copy: the memory-lean form).
- `hnsw`: `IndexHNSWFlat` graph with `hnsw_m` links per node (default 32),
  `ef_construction` (default 200) and `ef_search` (default 256; a search uses
  max(ef_search, k)).

IVF k-means is trained on at most `train_points_per_list * nlist` bank rows (default 64 per
list; FAISS's own default is 256), drawn with numpy's default_rng(`seed`): k-means costs
~2 D x (training rows) x nlist x 10 iterations flops, the largest part of an IVF build at
N = 100k, and 64 points per centroid keep the centroids (and the recall) close to a full
training at a quarter of the cost (measured in benchmarks/results/knn-ann.md).

Recall calibration (`recall_target`, with `recall_queries` and `recall_k`; ivf_flat, ivf_pq
re-ranked and hnsw): the search width (IVF `nprobe`, HNSW `ef_search`) is the smallest one
whose lower confidence bound on recall@k reaches the target (`scorers.knn_recall`), recorded
in `options`; its recall in `recall`.

Determinism: IVF k-means (coarse quantizer and PQ codebooks) is trained with the fixed seed
`seed` (`ClusteringParameters.seed` of the index and of its PQ). HNSW draws node levels from
FAISS's fixed-seed generator; its multi-threaded insertion order is not deterministic, so with
`deterministic=True` (default) the graph is built single-threaded (the thread count is
restored afterwards). Searches are deterministic.

GPU: when `faiss.get_num_gpus() > 0` (and `use_gpu` is not False), flat and IVF indexes are
moved to GPU 0 after training and adding on the CPU; HNSW has no GPU version and stays on the
CPU, and so does a re-ranked IVF-PQ index (FAISS moves no `IndexRefine` to a GPU). A
configuration the GPU build refuses (e.g. an unsupported PQ size) stays on the CPU.
GPU k-selection is limited to k <= 2048; a larger k searches a CPU copy of the index, made
(once) on first need.

Memory: the bank is a `scorers.knn_bank.BankStream` (an array is one chunk of it) added
chunk by chunk into storage sized once, so the index holds the only copy of the bank (an
IVF index's training sample is freed before its lists are filled).

Queries are searched in chunks of `query_chunk` rows, so a search holds at most one chunk of
(chunk, k) distances and ids beyond the returned arrays.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from featstore.errors import FeatstoreError, FeatstoreWarning, UsageError

from .kernels.iptopk import exact_ip_search, exact_ip_values
from .kernels.rowfeat import l2_normalize_rows
from .knn_bank import BankStream, exact_knn, fill_flat, fill_ivf, sample_rows
from .knn_recall import (
    calibrate_width,
    check_recall_target,
    query_recalls,
    recall_at_k,
    recall_lower_bound,
)

INDEX_KINDS = ("exact", "ivf_flat", "ivf_pq", "hnsw")
METRICS = ("l2", "ip")
GPU_MAX_K = 2048
DEFAULT_QUERY_CHUNK = 8192
DEFAULT_EF_SEARCH = 256
# exact inner-product search on the CPU at k >= N / 10 uses own sgemm + partition
OWN_IP_SEARCH_FRACTION = 10
DEFAULT_TRAIN_POINTS_PER_LIST = 64
DEFAULT_RERANK_FACTOR = 10  # ivf_pq: exact re-ranking of 10 k candidates per query
MIN_TRAIN_POINTS_PER_LIST = 39


def _faiss_distributions() -> list[str]:
    """The installed distributions that provide the `faiss` module (faiss-gpu, faiss-cpu,
    faiss-gpu-cu12, ...), by name."""
    from importlib.metadata import distributions

    names = {str(d.metadata["Name"] or "") for d in distributions()}
    return sorted(n for n in names if n.lower().startswith("faiss"))


def faiss_install_hint(found: Sequence[str]) -> str:
    """What to install where FAISS cannot load: the CPU build in place of a GPU one (the two
    provide the same `faiss` module, so one replaces the other), with the command."""
    gpu = [n for n in found if "gpu" in n.lower()]
    if gpu:
        return (f"{', '.join(gpu)} loads its CUDA libraries at import, which a CPU-only "
                "machine or a memory limit (ulimit -v) may not allow: install the CPU build in "
                f"its place (`pip uninstall -y {' '.join(gpu)} && pip install faiss-cpu`, "
                "README \"CPU-only install\"), or raise the limit")
    return ("install the CPU build (`pip install faiss-cpu`, README \"CPU-only install\"), "
            "or raise the memory limit if one is set (ulimit -v)")


def load_faiss() -> Any:
    """The faiss module, imported on first use (keeps `import scorers` fast). A FAISS that
    cannot load (the faiss-gpu wheel dlopens its CUDA libraries at import, which fails under a
    memory limit such as `ulimit -v`, or a broken install) is a FeatstoreError saying what to
    install (`faiss_install_hint`: faiss-cpu in place of the GPU build), so a run over many
    scorers skips the neighbour scorers with that reason and a scorer named with --method
    exits 1, never `unexpected RuntimeError`. Where faiss-cpu is installed it is the `faiss`
    module, and loads under the limit."""
    try:
        import faiss  # lazy: keeps `import scorers` fast
    except (ImportError, RuntimeError, OSError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FeatstoreError(
            f"FAISS (nearest-neighbour search) cannot be loaded: {text}; "
            f"{faiss_install_hint(_faiss_distributions())}") from exc
    return faiss


def num_gpus() -> int:
    """Number of GPUs FAISS can use (0 with a CPU-only build)."""
    faiss = load_faiss()
    getter = getattr(faiss, "get_num_gpus", None)
    if getter is None:
        return 0
    try:
        return int(getter())
    except Exception:  # noqa: BLE001 - a broken CUDA runtime means no GPU
        return 0


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (an all-zero row stays zero), computed in float64,
    returned as float32 (`scorers.kernels.rowfeat.l2_normalize_rows`).

    Sources, checked in their code: OpenOOD v1.5 (`knn_postprocessor.py` at 3c35632) and
    KNN-OOD's `run_imagenet.py` (deeplearning-wisc/knn-ood at 2afb2bb) compute
    `x / ||x|| + 1e-10` (an all-zero row gives NaN there); KNN-OOD's `run_cifar.py` and
    `run_imagenet_vit.py` compute `x / (||x|| + 1e-10)`. Both make the cosine geometry depend
    on the features' scale (rows of norm ~1e-29 are shrunk towards 0 by the absolute 1e-10),
    so featstore divides by the norm alone and maps a zero row to zero: for a row with
    ||x|| >> 1e-10 the three agree to ~1e-10 relative, below float32 resolution of the
    normalized features."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"l2_normalize expects a 2-D array, got shape {x.shape}")
    out = np.empty(x.shape, dtype=np.float32)
    # one fused Numba pass per row (float64 sum of squares, then the division), no float64
    # copy of the array; each row is computed alone, so any row block gives the same bits
    l2_normalize_rows(x, out)
    return out


def subsample_size(n: int, fraction: float) -> int:
    """Rows kept when a bank of n rows is subsampled to `fraction`: ceil(fraction * n), >= 1."""
    return max(1, min(n, math.ceil(fraction * n - 1e-9)))


def subsample_rows(n: int, fraction: float, seed: int) -> np.ndarray | None:
    """Sorted row indices of a uniform random subsample without replacement, or None for all.

    Deterministic in (n, fraction, seed): numpy's PCG64 generator seeded with `seed`."""
    size = subsample_size(n, fraction)
    if size >= n:
        return None
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=size, replace=False))


def _default_nlist(n: int) -> int:
    return max(1, min(int(4 * math.sqrt(n)), n // 39))


def _default_pq_m(d: int) -> int:
    target = max(1, d // 8)
    for m in range(target, 0, -1):
        if d % m == 0:
            return m
    return 1


def _flat(faiss: Any, metric: str, d: int) -> Any:
    """An exact flat index (L2 or inner product)."""
    return faiss.IndexFlatL2(d) if metric == "l2" else faiss.IndexFlatIP(d)


def check_rerank_factor(rerank_factor: int | None, kind: str) -> int:
    """`rerank_factor` as an int >= 0 (None: DEFAULT_RERANK_FACTOR for ivf_pq); UsageError
    for another value, or a factor given to an index kind that has no quantized distances."""
    if rerank_factor is None:
        return DEFAULT_RERANK_FACTOR if kind == "ivf_pq" else 0
    if (isinstance(rerank_factor, bool) or not isinstance(rerank_factor, numbers.Integral)
            or rerank_factor < 0):
        raise UsageError(f"knn index: rerank_factor={rerank_factor!r} must be an integer >= 0 "
                         "(0: quantized distances, no re-ranking)")
    if kind != "ivf_pq" and rerank_factor:
        raise UsageError(f"knn index: rerank_factor={rerank_factor} applies to ivf_pq only "
                         f"(index {kind!r} computes exact distances)")
    return int(rerank_factor)


def ivf_part(index: Any) -> Any:
    """The IVF index inside `index`: itself, or the base of an exact re-ranking wrapper."""
    base = getattr(index, "base_index", None)
    if base is None:
        return index
    return load_faiss().downcast_index(base)


def _with_rerank(faiss: Any, index: Any, bank: BankStream, metric: str, factor: int) -> Any:
    """`index` (filled) wrapped in an exact re-ranking `IndexRefine` whose flat copy of the
    bank is filled chunk by chunk into storage sized once; `index` itself when factor is 0."""
    if not factor:
        return index
    flat = _flat(faiss, metric, bank.dim)
    fill_flat(flat, flat, bank)
    refined = faiss.IndexRefine(index, flat)
    refined.k_factor = float(factor)
    return refined


def _build_ivf(faiss: Any, bank: BankStream, kind: str, metric: str, nlist: int | None,
               nprobe: int | None, pq_m: int | None, pq_nbits: int | None, seed: int,
               train_points_per_list: int, options: dict[str, Any]) -> Any:
    """A trained IVF-Flat or IVF-PQ index holding `bank` (trained on a seeded sample of
    `train_points_per_list * nlist` rows, filled chunk by chunk: `scorers.knn_bank`); the
    options it chose go into `options` (nlist, nprobe, train_points_per_list; pq_m,
    pq_nbits). An IVF-PQ index is returned bare (the caller adds the re-ranking)."""
    n, d = bank.rows, bank.dim
    faiss_metric = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    nlist = _default_nlist(n) if nlist is None else int(nlist)
    if not 1 <= nlist <= n:
        raise UsageError(f"knn index: nlist={nlist} must satisfy 1 <= nlist <= {n} "
                         "(bank size)")
    nprobe = max(8, nlist // 16) if nprobe is None else int(nprobe)
    if nprobe < 1:
        raise UsageError(f"knn index: nprobe={nprobe} must be >= 1")
    nprobe = min(nprobe, nlist)
    quantizer = _flat(faiss, metric, d)
    if kind == "ivf_flat":
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss_metric)
    else:
        pq_m = _default_pq_m(d) if pq_m is None else int(pq_m)
        if pq_m < 1 or d % pq_m:
            raise UsageError(f"knn index: pq_m={pq_m} must divide the dimension {d}")
        max_bits = max(1, min(8, int(math.floor(math.log2(n))) if n > 1 else 1))
        pq_nbits = max_bits if pq_nbits is None else int(pq_nbits)
        if not 1 <= pq_nbits <= 16:
            raise UsageError(f"knn index: pq_nbits={pq_nbits} must satisfy "
                             "1 <= pq_nbits <= 16")
        index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, pq_nbits, faiss_metric)
        index.pq.cp.seed = int(seed)
        index.pq.cp.max_points_per_centroid = int(train_points_per_list)
        options.update(pq_m=pq_m, pq_nbits=pq_nbits)
    if train_points_per_list < MIN_TRAIN_POINTS_PER_LIST:
        raise UsageError(f"knn index: train_points_per_list={train_points_per_list} must be "
                         f">= {MIN_TRAIN_POINTS_PER_LIST} (FAISS's minimum per k-means cell)")
    index.cp.seed = int(seed)
    index.cp.verbose = False
    index.cp.max_points_per_centroid = int(train_points_per_list)
    sample = sample_rows(bank, int(train_points_per_list) * nlist, seed)
    index.train(sample)
    del sample  # freed before the lists are filled
    fill_ivf(faiss, index, bank)
    index.nprobe = nprobe
    options.update(nlist=nlist, nprobe=nprobe, train_points_per_list=int(train_points_per_list))
    return index


def _build_hnsw(faiss: Any, bank: BankStream, metric: str, hnsw_m: int, ef_construction: int,
                ef_search: int, deterministic: bool, options: dict[str, Any]) -> Any:
    """An HNSW-Flat index holding `bank` (added chunk by chunk into its reserved flat
    storage), built on one thread when `deterministic`; its options go into `options`."""
    if hnsw_m < 2:
        raise UsageError(f"knn index: hnsw_m={hnsw_m} must be >= 2")
    if ef_search < 1 or ef_construction < 1:
        raise UsageError("knn index: ef_search and ef_construction must be >= 1")
    faiss_metric = faiss.METRIC_L2 if metric == "l2" else faiss.METRIC_INNER_PRODUCT
    index = faiss.IndexHNSWFlat(bank.dim, int(hnsw_m), faiss_metric)
    index.hnsw.efConstruction = int(ef_construction)
    index.hnsw.efSearch = int(ef_search)
    threads = faiss.omp_get_max_threads() if hasattr(faiss, "omp_get_max_threads") else 0
    if deterministic and threads:
        faiss.omp_set_num_threads(1)
    try:
        fill_flat(index, faiss.downcast_index(index.storage), bank)
    finally:
        if deterministic and threads:
            faiss.omp_set_num_threads(threads)
    options.update(hnsw_m=int(hnsw_m), ef_construction=int(ef_construction),
                   ef_search=int(ef_search))
    return index


class KnnIndex:
    """A built FAISS index over a bank; `search(queries, k)` returns (distances, ids).

    Distances are FAISS's: squared L2 for metric "l2", inner products for metric "ip",
    float32, sorted best first (ascending for l2, descending for ip)."""

    def __init__(
        self,
        bank: np.ndarray | BankStream,
        *,
        metric: str = "l2",
        kind: str = "exact",
        nlist: int | None = None,
        nprobe: int | None = None,
        pq_m: int | None = None,
        pq_nbits: int | None = None,
        rerank_factor: int | None = None,
        hnsw_m: int = 32,
        ef_construction: int = 200,
        ef_search: int | None = None,
        seed: int = 0,
        use_gpu: bool | None = None,
        deterministic: bool = True,
        query_chunk: int = DEFAULT_QUERY_CHUNK,
        recall_queries: np.ndarray | None = None,
        recall_k: int = 0,
        recall_target: float | None = None,
        train_points_per_list: int = DEFAULT_TRAIN_POINTS_PER_LIST,
    ):
        faiss = load_faiss()

        if metric not in METRICS:
            raise UsageError(f"knn index: metric {metric!r} is not one of {METRICS}")
        if kind not in INDEX_KINDS:
            raise UsageError(f"knn index: kind {kind!r} is not one of {INDEX_KINDS}")
        if not isinstance(bank, BankStream):
            bank = np.ascontiguousarray(bank, dtype=np.float32)
            if bank.ndim != 2 or bank.shape[0] == 0:
                raise UsageError("knn index: bank must be a non-empty (N, D) array, got "
                                 f"{bank.shape}")
            bank = BankStream.of(bank)
        if bank.rows == 0:
            raise UsageError("knn index: bank must be a non-empty (N, D) array, got "
                             f"{(0, bank.dim)}")
        if query_chunk < 1:
            raise UsageError(f"knn index: query_chunk={query_chunk} must be >= 1")
        rerank = check_rerank_factor(rerank_factor, kind)
        target = check_recall_target(recall_target, kind, nprobe, ef_search, recall_queries,
                                     recall_k, rerank)
        ef_search = DEFAULT_EF_SEARCH if ef_search is None else ef_search
        n, d = bank.rows, bank.dim
        self.metric = metric
        self.kind = kind
        self.ntotal = n
        self.dim = d
        self.query_chunk = int(query_chunk)
        self.ef_search = int(ef_search)
        self.options: dict[str, Any] = {"seed": int(seed)}
        if kind == "exact":
            index = _flat(faiss, metric, d)
            fill_flat(index, index, bank)
        elif kind in ("ivf_flat", "ivf_pq"):
            index = _build_ivf(faiss, bank, kind, metric, nlist, nprobe, pq_m, pq_nbits, seed,
                               train_points_per_list, self.options)
            if kind == "ivf_pq":
                index = _with_rerank(faiss, index, bank, metric, rerank)
                self.options["rerank_factor"] = rerank
        else:
            index = _build_hnsw(faiss, bank, metric, hnsw_m, ef_construction, ef_search,
                                deterministic, self.options)
        self._cpu_index: Any = index
        self._index: Any = index
        self.on_gpu = False
        # recall@k of an approximate index against exact search, on caller-given queries
        self.recall: float | None = None
        self.recall_queries = 0
        self._calibration: tuple[np.ndarray, float] | None = None  # (queries, target)
        self._widths: dict[int, tuple[int, float]] = {}  # k -> (calibrated width, recall)
        if kind != "exact" and recall_queries is not None and len(recall_queries) and recall_k:
            self._measure_recall(faiss, index, bank, recall_queries, recall_k, target)
        want_gpu = (num_gpus() > 0) if use_gpu is None else bool(use_gpu)
        if want_gpu and kind != "hnsw" and not rerank and num_gpus() > 0:
            self._move_to_gpu(faiss, index)

    def _width(self, k: int) -> int | None:
        """The search width used at k: the width calibrated for k when a recall target is
        set, else the fixed one (IVF nprobe, HNSW max(ef_search, k)); None for exact."""
        if self.kind == "exact":
            return None
        if self._calibration is not None:
            width = self.width_for(k)[0]
        else:
            width = self.ef_search if self.kind == "hnsw" else self.options["nprobe"]
        return max(width, k) if self.kind == "hnsw" else width

    @staticmethod
    def _apply_width(index: Any, kind: str, width: int | None) -> None:
        if width is None:  # exact search: no width
            return
        if kind == "hnsw":
            index.hnsw.efSearch = int(width)
        else:
            ivf_part(index).nprobe = int(width)

    def _host_index(self) -> Any:
        """The CPU index (made once from the GPU index when searching on a GPU)."""
        if self._cpu_index is None:
            faiss = load_faiss()

            self._cpu_index = faiss.index_gpu_to_cpu(self._index)
        return self._cpu_index

    def _exact_calibration_ids(self, k: int) -> np.ndarray:
        """Exact top-k ids of the calibration queries from the index itself: every IVF list
        (nprobe = nlist, exact distances for IVF-Flat), HNSW's flat storage, or the flat copy
        that re-ranks IVF-PQ."""
        faiss = load_faiss()

        assert self._calibration is not None  # called by width_for, with a recall target
        queries = self._calibration[0]
        index = self._host_index()
        if self.kind == "hnsw":
            return faiss.downcast_index(index.storage).search(queries, k)[1]
        if self.kind == "ivf_pq":
            return faiss.downcast_index(index.refine_index).search(queries, k)[1]
        index.nprobe = index.nlist
        return index.search(queries, k)[1]

    def width_for(self, k: int) -> tuple[int, float]:
        """(width, recall@k) calibrated to the recall target for searches at k (cached)."""
        if k not in self._widths:
            assert self._calibration is not None, "width_for needs a recall target"
            queries, target = self._calibration
            index = self._host_index()
            exact = self._exact_calibration_ids(k)

            means: dict[int, float] = {}

            def bound_of(width: int) -> float:
                self._apply_width(index, self.kind, max(width, k) if self.kind == "hnsw"
                                  else width)
                per_query = query_recalls(index.search(queries, k)[1], exact)
                means[width] = float(per_query.mean())
                return recall_lower_bound(per_query)

            lo, hi = ((k, max(k, self.ntotal)) if self.kind == "hnsw"
                      else (1, ivf_part(index).nlist))
            width, _ = calibrate_width(bound_of, lo, hi, target)
            self._widths[k] = (width, means[width])
        return self._widths[k]

    def _measure_recall(self, faiss: Any, index: Any, bank: BankStream,
                        recall_queries: np.ndarray, recall_k: int,
                        target: float | None) -> None:
        """recall@k of the approximate `index` against exact search on the queries; with a
        `target`, the search width is calibrated to it (module docstring)."""
        queries = np.ascontiguousarray(recall_queries, dtype=np.float32)
        k = min(int(recall_k), self.ntotal)
        if target is not None:
            self._calibration = (queries, target)
            width, self.recall = self.width_for(k)
            self.options.update({"ef_search" if self.kind == "hnsw" else "nprobe": width,
                                 "recall_target": target})
            if self.recall < target:
                warnings.warn(
                    f"knn index {self.kind}: recall@{k} {self.recall:.3f} stays below the "
                    f"recall_target {target} even at the widest search ({width}); "
                    + ("raise rerank_factor or pq_m" if self.kind == "ivf_pq"
                       else "the index cannot reach it"), FeatstoreWarning, stacklevel=3)
        else:
            exact = exact_knn(faiss, queries, bank, k, self.metric)
            self._apply_width(index, self.kind, self._width(k))
            self.recall = recall_at_k(index.search(queries, k)[1], exact)
        self._apply_width(index, self.kind, self._width(k))
        self.recall_queries = len(queries)
        self.options["recall_k"] = k

    def _move_to_gpu(self, faiss: Any, index: Any) -> None:
        """Search on GPU 0 from now on, unless the GPU build refuses the configuration."""
        try:
            self._gpu_res = faiss.StandardGpuResources()
            gpu_index = faiss.index_cpu_to_gpu(self._gpu_res, 0, index)
        except Exception:  # noqa: BLE001 - configuration the GPU build refuses: stay on CPU
            pass
        else:
            self._index = gpu_index
            self._cpu_index = None  # made again from the GPU index only if k > GPU_MAX_K
            self.on_gpu = True

    def __repr__(self) -> str:
        where = "gpu" if self.on_gpu else "cpu"
        return (f"KnnIndex(kind={self.kind!r}, metric={self.metric!r}, ntotal={self.ntotal}, "
                f"dim={self.dim}, {where}, {self.options})")

    def search_key(self, k: int) -> Hashable:
        """What, besides k, a search at k depends on: searches with the same key return the
        same first-k results whatever larger k they were run at (used to share one search
        across several k). The search width (HNSW's beam max(ef_search, k), IVF's nprobe;
        calibrated per k with a recall target); GPU k-selection is limited
        to GPU_MAX_K, above which the CPU index answers; FAISS answers k = 1 by a dedicated
        arg-min kernel whose float32 rounding differs from the general one; an exact inner-product
        search at k >= N / 10 is own sgemm + partition, rounded differently from FAISS's."""
        device = "gpu" if self.on_gpu and k <= GPU_MAX_K else "cpu"
        return (self._width(k), device, k == 1, self._uses_own_ip_search(k))

    def _uses_own_ip_search(self, k: int) -> bool:
        """Exact inner-product search on the CPU with k >= N / OWN_IP_SEARCH_FRACTION:
        sgemm + partition (`scorers.kernels.iptopk`) beats FAISS's k-heaps there."""
        return (self.kind == "exact" and self.metric == "ip" and not self.on_gpu
                and k * OWN_IP_SEARCH_FRACTION >= self.ntotal)

    def _flat_vectors(self) -> np.ndarray:
        """The (N, D) float32 bank as stored in the CPU flat index (a view, no copy)."""
        faiss = load_faiss()

        index = self._host_index()
        return faiss.rev_swig_ptr(index.get_xb(), self.ntotal * self.dim).reshape(
            self.ntotal, self.dim)

    def search_values(self, queries: np.ndarray, k: int) -> np.ndarray:
        """The distances of `search(queries, k)` alone (n, k) float32, the same bits; on the
        own inner-product path without the sort of the ids (`exact_ip_values`)."""
        if self._uses_own_ip_search(int(k)):
            queries = self._checked(queries, int(k))
            return exact_ip_values(self._flat_vectors(), queries, int(k))
        return self.search(queries, k)[0]

    def _checked(self, queries: np.ndarray, k: int) -> np.ndarray:
        """queries as float32 (n, D) and k in [1, N], or a UsageError."""
        if not 1 <= k <= self.ntotal:
            raise UsageError(f"knn index: k={k} must satisfy 1 <= k <= {self.ntotal} (bank size)")
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise UsageError(f"knn index: queries must be (n, {self.dim}), got {queries.shape}")
        return queries

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(distances (n, k) float32, ids (n, k) int64) of the k best bank rows per query.

        Queries are searched in chunks of `query_chunk` rows."""
        k = int(k)
        queries = self._checked(queries, k)
        n = queries.shape[0]
        if self._uses_own_ip_search(k):
            return exact_ip_search(self._flat_vectors(), queries, k)
        index = self._host_index() if self.on_gpu and k > GPU_MAX_K else self._index
        self._apply_width(index, self.kind, self._width(k))
        dist = np.empty((n, k), dtype=np.float32)
        ids = np.empty((n, k), dtype=np.int64)
        for start in range(0, n, self.query_chunk):
            stop = min(start + self.query_chunk, n)
            d_chunk, i_chunk = index.search(np.ascontiguousarray(queries[start:stop]), k)
            dist[start:stop] = d_chunk
            ids[start:stop] = i_chunk
        return dist, ids


def build_index(bank: np.ndarray, metric: str = "l2", kind: str = "exact",
                **options: Any) -> KnnIndex:
    """Build a KnnIndex over `bank` (see the module docstring for the kinds and options)."""
    return KnnIndex(bank, metric=metric, kind=kind, **options)
