"""Numerical kernels shared by the scorers: each scorer module states its formula and its
class, and takes the heavy lifting from here (NumPy / Numba only, no store I/O of their own
beyond the chunks a scorer hands them, never torch).

- `softmax`:    row-wise softmax, logsumexp, max softmax, softmax with sum p log p, negative
                entropy, GEN's top-M generalized entropies (the public API of `rowexp`)
- `rowexp`:     the fused Numba row loops behind `softmax` (a vectorized float64 exp within
                1 ulp; max, exp, sum, selection of the top M in one pass per row)
- `select`:     exact percentiles of a streamed float32 array by a two-pass radix select
- `gather`:     row gathers of W.T into float64 sums (the sparse-product primitives) and the
                sparse-versus-dense cost model
- `bands`:      band sums over clip thresholds (ReAct) and over nested weight masks (DICE)
- `topk`:       one descending sort per row shared by every kept count (ASH, SCALE), and
                the running sums over nested kept sets
- `subspace`:   the principal subspace of the id/train features about the head's origin
                (ViM, Residual), and the numerical-rank cutoff
- `classstats`: per-class sums and means, tied and global covariances, whitening factors and
                class-conditional Mahalanobis distances (MDS, RMDS, KL matching), the mean
                train feature (DICE, fDBD, NCI)
- `mincross`:   the minimum over templates of a cross-entropy -sum_j p_j log d_kj (KL
                matching): float32 GEMM pruning, float64 sums for the candidates left
- `precision`:  the `precision` of the GEMM-bound scorers' scoring products (float32 sgemm
                with float64 sums, or float64)

Nothing is imported here, so importing one kernel module does not load the others.
"""
