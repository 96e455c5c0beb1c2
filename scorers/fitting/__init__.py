"""The method layer's shared fitting: what several scorers of `scorers.methods` share above
the kernels, namely a base class for a common parameter rule on a store and the passes that
stream a store's rows into fitted statistics (the arithmetic of each chunk is
`scorers.kernels`, which takes and returns arrays only).

- `principal`:  ViM and Residual: `PrincipalScorer` (the rule for `dim`), the id/train pass for
                the covariance about u and its eigendecomposition, the mean-residual pass
- `classstats`: the id/train passes for the mean feature (DICE, fDBD, NCI) and for the class
                means and tied / global covariances (MDS, RMDS)
- `percentiles`: ReAct and VRA: exact percentiles of a split's feature entries, memoised
- `topk`:       ASH and SCALE: the percentiles that keep at least one of a store's D features

Nothing is imported here, so importing one module does not load the others.
"""
