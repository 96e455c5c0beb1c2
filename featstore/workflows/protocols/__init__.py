"""Evaluation protocols from the literature, built on the store:

- `osr`: open-set recognition class splits (closed/open ratios over seeds), train + extract +
  evaluate per split, mean ± std over splits (remote-sensing OOD benchmark, Wang et al. 2024);
- `wordnet`: WordNet class similarity and threshold / OODness-tier ID-OOD assignment (FACETS,
  DSAA 2023);
- `shift`: semantic x covariate shift-level grids, per-level means, correlation and sensitivity,
  shift degrees from features, LAID decomposition, IS-OOD list import (IS-OOD, NeurIPS 2024);
- `lists`: a directory of OpenOOD / IS-OOD / FACETS image lists -> a benchmark spec.
"""
