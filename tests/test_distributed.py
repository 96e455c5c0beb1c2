"""Distributed extraction (DESIGN §6, featstore.extraction.distributed): `torchrun --nproc-per-node
2
--standalone -m featstore extract ...` on CPU (gloo) with a real tiny torch model and real
small data writes a store whose every file is byte-identical to a single-process extraction
of the same spec, and a rank killed with SIGKILL mid-split leaves a store that a rerun — the
same torchrun command, or a single process — finishes identically.

Reference: `featstore.extraction.extract.extract` in this process (one thread, like the ranks)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import torch

from featstore import Store
from featstore.errors import FeatstoreError, UsageError
from featstore.extraction.distributed import Context, shard
from featstore.extraction.extract import ExtractOptions, extract
from featstore.store.store import STAT_FILE

HERE = Path(__file__).parent
BATCH = 4
PART_ROWS = BATCH * ExtractOptions().part_batches   # 64 rows per part
TRANSFORM = """
[transform]
resize = 16
crop = 16
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]
"""
DIGITS = """
[[split]]
name = "id/test"
source = { builtin = "digits", classes = [0, 1, 2], part = "test" }

[[split]]
name = "ood/far/small"
source = { builtin = "noise", kind = "uniform", count = 40 }
"""


def _big(count: int) -> str:
    return f"""
[[split]]
name = "ood/far/big"
source = {{ builtin = "noise", kind = "gaussian", count = {count} }}
"""


@pytest.fixture(autouse=True)
def _tiny_models_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent))
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)


def _env(tag: str = "") -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = str(HERE.parent)
    env["OMP_NUM_THREADS"] = "1"
    env["FEATSTORE_TEST_TAG"] = tag
    return env


def _torchrun(model: str, spec: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--standalone", "--monitor-interval", "0.2", "-m", "featstore", "extract",
            "--model", model, "--spec", str(spec), "--out", str(out), "--device", "cpu",
            "--batch-size", str(BATCH), "--workers", "0", "--quiet", *extra]


def _reference(model: str, spec: Path, out: Path, **options) -> None:
    """A single-process extraction of the same spec with the CLI's options, on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        extract(model, spec, out, options=ExtractOptions(
            device="cpu", batch_size=BATCH, num_workers=0, progress=False, **options))
    finally:
        torch.set_num_threads(threads)


def _assert_same_store(got: Path, want: Path) -> None:
    """store.json equal field by field (it holds no timestamps); every HDF5 file equal byte
    for byte; no parts directory or temporary file left. `.featstore.stat` (each file's
    size, mtime and inode when its sha256 was checked: a local cache, not store content) is
    left out."""
    manifest = json.loads((got / "store.json").read_text())
    assert manifest == json.loads((want / "store.json").read_text())

    def listed(root: Path) -> list[Path]:
        return sorted(p.relative_to(root) for p in root.rglob("*")
                      if p.is_file() and p.name != STAT_FILE)

    files = listed(want)
    assert listed(got) == files
    for rel in files:
        assert (got / rel).read_bytes() == (want / rel).read_bytes(), rel
    for name, entry in manifest["splits"].items():
        assert entry["complete"] is True, name
    assert Store.open(got).verify() == []


# ----------------------------------------------------------------- sharding rule
def test_shards_are_contiguous_blocks_covering_every_part_once():
    for parts in range(0, 40):
        for world in range(1, 9):
            blocks = [shard(parts, r, world) for r in range(world)]
            assert [k for b in blocks for k in b] == list(range(parts))
            sizes = [len(b) for b in blocks]
            assert max(sizes) - min(sizes) <= 1
            assert parts == 0 or len(blocks[0]) >= 1


# ----------------------------------------------------------------- error sharing
def _collectives_worker(rank: int, rendezvous: str, results: Path) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=2)
    ctx = Context(rank=rank, world_size=2, backend="gloo")
    log: dict = {}
    log["broadcast"] = ctx.on_main(lambda: {"from": ctx.rank})
    log["gathered"] = ctx.everywhere(lambda: ctx.rank * 10)

    def fail_on_rank1() -> None:
        if ctx.rank == 1:
            raise UsageError("split 'x': cannot read image 'a.png'")

    def fail_on_main() -> None:
        raise OSError(28, "No space left on device")

    for key, call in (("everywhere", lambda: ctx.everywhere(fail_on_rank1)),
                      ("on_main", lambda: ctx.on_main(fail_on_main))):
        try:
            call()
            log[key] = None
        except BaseException as exc:
            log[key] = [type(exc).__name__, str(exc)]
    dist.destroy_process_group()
    (results / f"rank{rank}.json").write_text(json.dumps(log))


def test_a_failure_on_one_rank_stops_every_rank_with_its_message(tmp_path):
    """Two real gloo ranks (forked): a result of rank 0 reaches rank 1, and an exception on
    one rank is raised on every rank (the others name the failed rank and its message)."""
    mp = multiprocessing.get_context("fork")
    rendezvous = f"file://{tmp_path / 'rdzv'}"
    procs = [mp.Process(target=_collectives_worker, args=(r, rendezvous, tmp_path))
             for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0["broadcast"] == r1["broadcast"] == {"from": 0}
    assert (r0["gathered"], r1["gathered"]) == (0, 10)
    assert r1["everywhere"] == ["UsageError", "split 'x': cannot read image 'a.png'"]
    assert r0["everywhere"] == ["UsageError", "rank 1: split 'x': cannot read image 'a.png'"]
    assert r0["on_main"][0] == "OSError"
    assert r1["on_main"] == ["FeatstoreError", "rank 0: OSError: [Errno 28] No space left on "
                                               "device"]
    assert issubclass(UsageError, FeatstoreError)


# ----------------------------------------------------------------- torchrun end to end
def test_torchrun_two_ranks_equals_single_process_byte_for_byte(tmp_path):
    """Sharded extraction with an extra (--feature-maps, whose layer name the manifest
    records) and a split smaller than one part (only rank 0 has work)."""
    spec = tmp_path / "bench.toml"
    spec.write_text(TRANSFORM + DIGITS + _big(600))
    model = "tests.helpers.tiny_models:tiny_map_cnn"
    _reference(model, spec, tmp_path / "single", feature_maps=True)
    proc = subprocess.run(_torchrun(model, spec, tmp_path / "dist", "--feature-maps"),
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same_store(tmp_path / "dist", tmp_path / "single")
    entry = json.loads((tmp_path / "dist" / "store.json").read_text())["splits"]["ood/far/big"]
    assert entry["feature_maps_layer"] == "relu" and entry["num_rows"] == 600
    assert entry["extras"]["feature_maps"] == [600, 8, 16, 16]


def _rank_pid(tag: str, rank: int) -> int | None:
    """The pid of the torchrun worker of this test (environment tag) with RANK=rank."""
    want = {f"FEATSTORE_TEST_TAG={tag}".encode(), f"RANK={rank}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if want <= env:
            return int(entry.name)
    return None


def test_rank_killed_mid_split_resumes_identically(tmp_path):
    """kill -9 rank 1 while it writes its shard of the last split: torchrun stops, the split
    is invisible, the completed splits stay; rerunning the torchrun command, or a single
    process on a copy of the killed store, finishes with the single-process store's bytes."""
    count = 1500                                    # 24 parts: rank 1 owns parts 12..23
    parts_total = -(-count // PART_ROWS)
    rank1_first = shard(parts_total, 1, 2)[0]
    spec = tmp_path / "bench.toml"
    spec.write_text(TRANSFORM + DIGITS + _big(count))
    model = "tests.helpers.tiny_models:tiny_cnn"
    _reference(model, spec, tmp_path / "single")

    tag = uuid.uuid4().hex
    victim = tmp_path / "victim"
    proc = subprocess.Popen(_torchrun(model, spec, victim), env=_env(tag),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parts = victim / "splits" / "ood__far__big.parts"
    # rank 1's pid is looked up before its first part appears (a /proc scan takes long on a
    # busy machine), so that the kill follows the part's appearance at once, mid-split
    deadline, pid = time.time() + 180, None
    while time.time() < deadline:
        assert proc.poll() is None, "torchrun ended before rank 1 wrote a part"
        pid = pid or _rank_pid(tag, 1)
        if pid is not None and (parts / f"part-{rank1_first:06d}.h5").exists():
            break
        time.sleep(0.01)
    assert pid is not None, "rank 1's process not found"
    os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0, stderr[-2000:]

    killed = Store.open(victim)
    assert killed.splits() == ["id/test", "ood/far/small"]     # the big split is invisible
    assert killed.manifest["splits"]["ood/far/big"]["complete"] is False
    assert (parts / f"part-{rank1_first:06d}.h5").exists()
    assert len(list(parts.glob("part-*.h5"))) < parts_total, "the kill did not land mid-split"
    small_inode = (victim / "splits" / "ood__far__small.h5").stat().st_ino
    copy = tmp_path / "victim_single"
    shutil.copytree(victim, copy)

    proc = subprocess.run(_torchrun(model, spec, victim), env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (victim / "splits" / "ood__far__small.h5").stat().st_ino == small_inode
    _assert_same_store(victim, tmp_path / "single")

    _reference(model, spec, copy)                   # resume the killed store in one process
    _assert_same_store(copy, tmp_path / "single")
