"""The method layer's shared fitting: what several scorers of `scorers.methods` share above
the kernels, namely a base class for a common parameter rule on a store and the passes that
stream a store's rows into fitted statistics (the arithmetic of each chunk is
`scorers.kernels`, which takes and returns arrays only).

- `principal`:  ViM and Residual: `PrincipalScorer` (the rule for `dim`), the id/train pass for
                the covariance about u and its eigendecomposition, the mean-residual pass
- `classstats`: the id/train passes for the mean feature (DICE, fDBD, NCI) and for the class
                means and tied / global covariances (MDS, RMDS)
- `predmeans`:  CARef and CADRef: the id/train pass for the mean feature of the rows predicted
                as each class (and the mean of per-row logit statistics)
- `percentiles`: ReAct and VRA: exact percentiles of a split's feature entries, memoised
- `topk`:       ASH and SCALE: the percentiles that keep at least one of a store's D features
- `layers`:     the `--feature-layers` views a store holds, in extraction order, and the check
                of a named layer (mds_ensemble, gram, featurenorm, oodl's `layer`)
- `adascale`:   AdaSCALE-A / -L's shared scorer (`AdaScaleBase`): the id/val fit of the
                perturbation statistic's ECDF and the adaptive scale per row

Nothing is imported here, so importing one module does not load the others.
"""
