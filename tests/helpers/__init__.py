"""What the test files share, one job per module, imported as `tests.helpers.<module>`
(tests/conftest.py holds only fixtures and hooks; no test module imports another):

- stores: the stores the tests build as real HDF5 files (`structured_arrays` and smaller
  purpose-built ones)
- references: a store's arrays as float64 and NumPy transcriptions of the papers' formulas
- scoring: fitted scorers and the checks of a scorer against its reference
- cli: the CLI run in-process
- demo: the session demo's scale and rerun record
- images: ImageFolder trees of real photos and spec files over them
- extraction: small stores extracted with the tiny CNN
- tiny_models, user_models: real torch models named as `tests.helpers.<module>:<callable>`
- slurm: a real single-node Slurm cluster for the executor tests
"""
