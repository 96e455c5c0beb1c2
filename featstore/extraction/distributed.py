"""Distributed extraction under `torchrun` (DESIGN §6).

`torchrun --nproc-per-node N -m featstore extract ...` (single node) or with `--nnodes`,
`--node-rank` and `--rdzv-endpoint` (several nodes) starts N processes per node with the
environment variables WORLD_SIZE, RANK and LOCAL_RANK. `featstore extract` sees them
(`from_env`), joins the process group (NCCL when the extraction runs on CUDA, each rank on
`cuda:LOCAL_RANK`; gloo on CPU) and shards every split:

- Sharding rule: a split's N rows form P = ceil(N / part_rows) parts of `part_rows =
  batch_size * part_batches` consecutive rows (featstore.store.writer). Rank r of W extracts the
  contiguous block of parts [ceil(P r / W), ceil(P (r + 1) / W)) (`shard`), so every rank
  runs exactly the batches a single process runs (same rows in the same batch: bit-identical
  features, even where a kernel's result depends on the batch) and writes its parts under
  their global index into the split's parts directory.
- Rank 0 alone writes the manifest: it prepares each split's parts directory and marks the
  split incomplete before any rank writes a part, and once every rank has finished its
  shard it assembles the parts into the split file and commits it, exactly as a single
  process does. The store is therefore byte-identical to a single-process extraction.
- Every step that can fail runs under `on_main` or `everywhere`: the outcome is shared by a
  collective, so an error on one rank (a corrupt image in its shard, a full disk) stops every
  rank with that rank's message instead of leaving the others waiting.
- A rank that dies (kill -9, OOM) makes torchrun stop the others. The parts already written
  stay; rerunning the same command — with any number of ranks, or none — extracts only the
  missing parts and finishes with the same store.

The store directory must be one shared filesystem path for all nodes (NFS, Lustre, ...), and
the spec's data must be readable at the same paths on every node. Files written on one node
may show on another only after a delay: ranks wait up to FEATSTORE_DIST_FS_WAIT_S (default
120 s) for store.json, a parts directory's fingerprint and the other ranks' parts to appear.
Collectives time out after FEATSTORE_DIST_TIMEOUT_S (default 6 h: ranks wait for the slowest
block of a split and for rank 0's assembly).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from featstore import errors
from featstore.errors import FeatstoreError, UsageError

T = TypeVar("T")
TIMEOUT_ENV = "FEATSTORE_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 6 * 3600  # ranks wait for the slowest shard and for rank 0's merge
FS_WAIT_ENV = "FEATSTORE_DIST_FS_WAIT_S"
DEFAULT_FS_WAIT_S = 120.0     # how long a file written on another node may take to show


def torchrun_env() -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) from torchrun's environment, or None outside torchrun."""
    if "WORLD_SIZE" not in os.environ:
        return None
    try:
        world = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError as exc:
        raise UsageError(f"torchrun environment: WORLD_SIZE/RANK/LOCAL_RANK must be integers "
                         f"({exc})") from exc
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UsageError(f"torchrun environment: RANK={rank} LOCAL_RANK={local} "
                         f"WORLD_SIZE={world} is inconsistent")
    return rank, world, local


def shard(num_parts: int, rank: int, world_size: int) -> range:
    """Rank `rank`'s contiguous block of part indices: [ceil(P r / W), ceil(P (r + 1) / W)).

    Blocks differ in size by at most one, in rank order they cover 0..P-1, and rank 0's block
    is never empty when P >= 1 (its progress bar always shows work).
    """
    return range(-(-num_parts * rank // world_size), -(-num_parts * (rank + 1) // world_size))


@dataclass
class Context:
    """This process's place in the extraction: rank 0 of 1 outside torchrun."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    owns_group: bool = False
    fs_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if self.distributed and not self.fs_wait_s:
            self.fs_wait_s = float(os.environ.get(FS_WAIT_ENV, DEFAULT_FS_WAIT_S))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def shard(self, num_parts: int) -> range:
        return shard(num_parts, self.rank, self.world_size)

    # ------------------------------------------------------------------ collectives
    def on_main(self, fn: Callable[[], T]) -> T:
        """Run `fn` on rank 0 and give every rank its (picklable) result; an exception on
        rank 0 is raised there and, rebuilt with its message, on every other rank."""
        if not self.distributed:
            return fn()

        payload: list[Any] = [None]
        error: BaseException | None = None
        if self.is_main:
            try:
                payload = [("ok", fn())]
            except BaseException as exc:  # shared with the other ranks, then re-raised
                error = exc
                payload = [("error", _describe(exc, self.rank))]
        dist.broadcast_object_list(payload, src=0)
        if error is not None:
            raise error
        status, value = payload[0]
        if status == "error":
            raise _rebuild(value)
        return value

    def everywhere(self, fn: Callable[[], T]) -> T:
        """Run `fn` on every rank; if it fails on any rank, every rank raises (the failing
        rank its own exception, the others one naming the failed rank and its message)."""
        if not self.distributed:
            return fn()

        result: Any = None
        error: BaseException | None = None
        try:
            result = fn()
        except BaseException as exc:
            error = exc
        statuses: list[Any] = [None] * self.world_size
        dist.all_gather_object(statuses, _describe(error, self.rank) if error else None)
        if error is not None:
            raise error
        failed = [s for s in statuses if s is not None]
        if failed:
            raise _rebuild(failed[0])
        return result

    def close(self) -> None:
        """Leave the process group if this context created it."""
        if self.owns_group:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
            self.owns_group = False


def _describe(exc: BaseException, rank: int) -> dict[str, Any]:
    """A picklable record of `exc`: the featstore.errors class it is, its first line."""
    kind = next((cls.__name__ for cls in type(exc).__mro__
                 if issubclass(cls, FeatstoreError) and cls.__module__ == errors.__name__),
                None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if kind is None:
        text = f"{type(exc).__name__}: {text}"
    return {"rank": rank, "kind": kind or "FeatstoreError", "message": text}


def _rebuild(status: dict[str, Any]) -> FeatstoreError:
    cls = getattr(errors, status["kind"], FeatstoreError)
    return cls(f"rank {status['rank']}: {status['message']}")


def from_env(device: torch.device) -> tuple[Context, torch.device]:
    """The context of this process and the device it extracts on.

    Outside torchrun (or with WORLD_SIZE=1): a single-process context and `device` as given.
    Under torchrun: `cuda` without an index becomes `cuda:LOCAL_RANK`, and the process joins
    the default process group (NCCL on CUDA, gloo on CPU), unless the caller already
    initialised one, which is then used as is.
    """
    env = torchrun_env()
    if env is None or env[1] == 1:
        return Context(), device
    rank, world, local = env
    if device.type == "cuda":
        if device.index is None:
            if local >= torch.cuda.device_count():
                raise UsageError(f"LOCAL_RANK {local} but this node has "
                                 f"{torch.cuda.device_count()} CUDA device(s); start at most "
                                 "that many processes per node (--nproc-per-node)")
            device = torch.device("cuda", local)
        torch.cuda.set_device(device)

    if dist.is_initialized():
        ctx = Context(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local,
                      backend=str(dist.get_backend()), owns_group=False)
        return ctx, device
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    dist.init_process_group(backend=backend, timeout=timeout)
    return Context(rank=rank, world_size=world, local_rank=local, backend=backend,
                   owns_group=True), device
