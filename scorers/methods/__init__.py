"""The registered scorers: one module per detection method (`scorers/methods/<name>.py`).

Every module in this package is a scorer module: it holds one `Scorer` subclass with a
`name` (plus the kernels only that method, or a method built on it, uses). Shared machinery
(the `Scorer` contract, neighbour banks, metrics, sweeps, the registry itself) lives in
`scorers/`, outside this package. `scorers.registry` discovers the scorers by importing every
module here; nothing in this package imports the registry.
"""
