"""OpenOOD v1.5 as one protocol (`featstore protocol openood`): its benchmarks, preprocessing,
parameter search, metrics table and published numbers.

- `definitions`: the four benchmarks as data (`benchmarks/<name>.toml`, facts from OpenOOD's
  `openood/evaluation_api/datasets.py` and `preprocessor.py`, file and commit in each file),
  the check of a user's `benchmark_imglist` + image tree (every list and image, before any
  extraction) and the spec they make;
- `table`: OpenOOD's metrics layout (`ood.csv`: one row per OOD dataset and per near / far
  mean; FPR@95, AUROC, AUPR_IN, AUPR_OUT, ACC) with featstore's intervals, as CSV, Markdown
  and rows for the terminal;
- `published`: OpenOOD v1.5's published results (`published/openood_v1.5.csv`, each row
  naming its source file, line and commit) and the reference column beside a result;
- `run`: spec -> extraction -> evaluation at the defaults, with featstore's tuning and with
  OpenOOD's (`scorers.openood_aps`) -> tables, CSVs, results.json.
"""
