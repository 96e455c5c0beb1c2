"""Numerical kernels shared by the scorers: pure array functions (NumPy / Numba / SciPy BLAS
arrays in, arrays out; never a store, a split or a scorer, never torch). Each scorer module
states its formula and its class and takes the heavy lifting from here; the passes that stream
a store's rows through these kernels are `scorers.fitting` and `Scorer.map_rows`.

- `softmax`:    row-wise softmax, logsumexp, max softmax, softmax with sum p log p, negative
                entropy, GEN's top-M generalized entropies (the public API of `rowexp`)
- `rowexp`:     the fused Numba row loops behind `softmax` (a vectorized float64 exp within
                1 ulp; max, exp, sum, selection of the top M in one pass per row)
- `rowfeat`:    fused float64 passes per feature row: L2 normalization (KNN, NNGuide), SHE's
                pattern dot, NCI's proximity and L1 norm, fDBD's boundary sum and its table
- `select`:     exact percentiles of a streamed float32 array by a two-pass radix select
- `gather`:     row gathers of W.T into float64 sums (the sparse-product primitives) and the
                sparse-versus-dense cost model
- `bands`:      band sums over clip thresholds (ReAct) and over nested weight masks (DICE)
- `topk`:       one descending sort per row shared by every kept count (ASH, SCALE), and
                the running sums over nested kept sets
- `gram`:       Gram sums x^T x of row chunks into one float64 matrix (one BLAS dsyrk each)
- `subspace`:   the principal subspace about the head's origin u = -pinv(W) b (ViM,
                Residual): eigendecomposition of S, residual norms for every dim of a grid
- `classstats`: per-class and column sums, covariances as matrix or rows, whitening factors
                and class-conditional Mahalanobis distances (MDS, RMDS, KL matching, SHE)
- `minsqdist`:  the nearest center min_k ||z - c_k||^2: float32 GEMM pruning, float64
                decision (MDS, RMDS)
- `mincross`:   the minimum over templates of a cross-entropy -sum_j p_j log d_kj (KL
                matching): float32 GEMM pruning, float64 sums for the candidates left
- `iptopk`:     exact inner-product top-k by float32 sgemm + partition (NNGuide's bank)
- `adascale`:   AdaSCALE's perturbation statistic Q', its upper ECDF and the adaptive
                scale sum(x) / (sum of the top k of x) (AdaSCALE-A / -L)
- `classref`:   CARef / CADRef's relative errors against the predicted class's mean feature
                (|m_c - x|_1 and the head-sign-split E+ / E-, over |x|_1) in one pass per row
- `piecewise`:  OptFS's piecewise-constant shaping: each entry's bin on an equal-width grid,
                the per-bin logit contributions, the shaped features
- `histkl`:     WeiPer+KLD's per-row histograms on a fixed grid and their smoothed symmetric
                KL divergence to a reference density
- `knnfrac`:    CFOOD's fraction of reference points whose k-NN radius reaches a query (a
                binary search per point and a histogram) and the squared distances by GEMM
- `weibull`:    libMR's FitHigh (a Weibull MLE of a sample's largest values) and W_score,
                its CDF (OpenMax)
- `precision`:  the `precision` of the GEMM-bound scorers' scoring products (float32 sgemm
                with float64 sums, or float64)

Nothing is imported here, so importing one kernel module does not load the others.
"""
