"""Fault injection, store class (issue 22): concurrent writers, --overwrite, kill -9 at every
write stage, a full disk, damaged split / part / fingerprint files. Every test runs real HDF5
files and, where a crash is the fault, a real process killed with SIGKILL. References: the
sha256 of the split file an uninterrupted run writes (recorded in the same test), and the
exact files a directory held before the fault (listed by hand)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from featstore import Store
from featstore.errors import FeatstoreError, InputError, UsageError
from featstore.store.lock import StoreLock, StoreLockedError
from featstore.store.writer import FINGERPRINT, SplitWriter
from tests.helpers.cli import run_cli
from tests.helpers.stores import structured_arrays

HERE = Path(__file__).parent
SMALL = dict(num_classes=3, dim=8, n_train=40, n_val=20, n_test=20, n_ood=20)


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE.parent)
    env["OMP_NUM_THREADS"] = "1"
    return env


def _small_store(path: Path, **kw) -> Store:
    arrays = structured_arrays(**{**SMALL, **kw})
    return Store.from_arrays(path, head=arrays["head"], splits=arrays["splits"])


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------ the lock
HOLDER = """
import sys, time
from featstore.store.lock import StoreLock
with StoreLock(sys.argv[1], command="holder-test"):
    print("locked", flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def held(tmp_path):
    """A store whose write lock another process holds (released when the test ends)."""
    _small_store(tmp_path / "s")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "s")], env=_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield tmp_path / "s", proc
    proc.stdin.close()
    proc.wait(timeout=30)


def test_second_writer_is_refused_naming_the_holder(held):
    path, proc = held
    st = Store.open(path, mode="a")
    x = np.ones((4, SMALL["dim"]), np.float32)
    with pytest.raises(StoreLockedError, match=f"pid {proc.pid} .*holder-test"):
        st.write_split("ood/far/extra", features=x)
    with pytest.raises(StoreLockedError, match="one writer at a time"):
        Store.from_arrays(path, head=st.head, splits={"id/test": {"features": x}},
                          overwrite=True)
    assert Store.open(path).splits() == list(structured_arrays(**SMALL)["splits"])
    proc.stdin.close()
    proc.wait(timeout=30)   # a released lock (the holder exited) lets the writer in
    st.write_split("ood/far/extra", features=x)
    assert "ood/far/extra" in Store.open(path).splits()


def test_cli_writer_on_a_locked_store_exits_1_naming_the_holder(held, capsys, tmp_path):
    path, proc = held
    arrays = structured_arrays(**SMALL)
    np.savez(tmp_path / "a.npz", **{"head/weight": arrays["head"][0],
                                    "head/bias": arrays["head"][1],
                                    "id/test/features": arrays["splits"]["id/test"]["features"]})
    code, out, err = run_cli(capsys, "import", tmp_path / "a.npz", "--out", path, "--overwrite")
    assert code == 1 and f"pid {proc.pid}" in err and "unexpected" not in err, err
    assert Store.open(path).splits()   # the store is untouched


def test_manifest_merge_keeps_the_other_writers_committed_split(tmp_path):
    """Two writers that opened the store before either committed: the second commit merges
    into the manifest on disk instead of writing its stale copy over the first's."""
    _small_store(tmp_path / "s")
    a, b = Store.open(tmp_path / "s", mode="a"), Store.open(tmp_path / "s", mode="a")
    x = np.full((5, SMALL["dim"]), 0.5, np.float32)
    a.write_split("ood/far/from_a", features=x)
    b.write_split("ood/far/from_b", features=x * 2)
    final = Store.open(tmp_path / "s")
    assert {"ood/far/from_a", "ood/far/from_b"} <= set(final.splits())
    assert final.verify() == []


SPEC = """
[transform]
resize = 16
crop = 16
mean = [0.5, 0.5, 0.5]
std = [0.25, 0.25, 0.25]
{splits}
"""


def _spec(path: Path, names: list[str], count: int) -> Path:
    splits = "".join(f'\n[[split]]\nname = "ood/far/{n}"\nsource = {{ builtin = "noise", '
                     f'kind = "uniform", count = {count}, seed = {i} }}\n'
                     for i, n in enumerate(names))
    path.write_text(SPEC.format(splits=splits))
    return path


def _extract_cmd(spec: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "cli.app", "extract", "--model",
            "tests.helpers.tiny_models:tiny_cnn",
            "--spec", str(spec), "--out", str(out), "--device", "cpu", "--batch-size", "16",
            "--workers", "0", "--quiet"]


def test_two_extracts_at_once_never_lose_a_split(tmp_path, capsys):
    """Two `extract` runs with different specs into one --out at the same time: each either
    commits all its splits or exits 1 naming the other as the holder of the lock; rerunning
    the refused one completes the store with every split of both (the example of issue 22:
    both exited 0 and store.json kept only one run's splits). The two concurrent runs are
    separate processes; the sequential ones (the ID split first, the rerun) run the same CLI
    in-process (no interpreter start, no torch import per run)."""
    specs = [_spec(tmp_path / "a.toml", ["a1", "a2"], 300),
             _spec(tmp_path / "b.toml", ["b1", "b2"], 300)]
    out = tmp_path / "store"
    # the store's ID split first (extract refuses a spec without one into a store without one)
    id_spec = tmp_path / "id.toml"
    id_spec.write_text(SPEC.format(splits='\n[[split]]\nname = "id/test"\nsource = { builtin '
                                          '= "noise", kind = "uniform", count = 16, seed = 9 }\n'))
    code, _, err = run_cli(capsys, *_extract_cmd(id_spec, out)[3:])
    assert code == 0, err
    procs = [subprocess.Popen(_extract_cmd(s, out), env=_env(), stderr=subprocess.PIPE,
                              text=True) for s in specs]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    manifest = json.loads((out / "store.json").read_text())
    for (code, err), names in zip(results, (["a1", "a2"], ["b1", "b2"]), strict=True):
        assert code in (0, 1), err
        if code == 0:
            assert all(manifest["splits"][f"ood/far/{n}"]["complete"] for n in names)
        else:
            assert "is being written by pid" in err and "unexpected" not in err, err
    for (code, _), spec in zip(results, specs, strict=True):
        if code:
            rerun, _, err = run_cli(capsys, *_extract_cmd(spec, out)[3:])
            assert rerun == 0, err
    st = Store.open(out)
    assert sorted(st.splits()) == ["id/test", *(f"ood/far/{n}" for n in ("a1", "a2", "b1",
                                                                          "b2"))]
    assert st.verify() == []


# ------------------------------------------------------------------------------ --overwrite
def _npz(path: Path) -> Path:
    arrays = structured_arrays(**SMALL)
    flat = {"head/weight": arrays["head"][0], "head/bias": arrays["head"][1]}
    for name in ("id/train", "id/test"):
        flat[f"{name}/features"] = arrays["splits"][name]["features"]
    np.savez(path, **flat)
    return path


def test_overwrite_never_deletes_a_directory_that_is_not_a_store(tmp_path, capsys):
    target = tmp_path / "thesis"
    target.mkdir()
    (target / "chapter1.tex").write_text("years of work")
    (target / "figs").mkdir()
    (target / "figs" / "a.png").write_bytes(b"png")
    for extra in ([], ["--overwrite"]):
        code, out, err = run_cli(capsys, "import", _npz(tmp_path / "a.npz"), "--out", target,
                                 *extra)
        assert code == 2 and "is not a featstore store" in err, err
        assert "pass --overwrite" not in err
    assert (target / "chapter1.tex").read_text() == "years of work"
    assert sorted(p.name for p in target.rglob("*")) == ["a.png", "chapter1.tex", "figs"]


def test_overwrite_of_a_store_keeps_the_users_files_beside_it(tmp_path, capsys):
    _small_store(tmp_path / "s", seed=1)
    (tmp_path / "s" / "NOTES.md").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.h5").write_bytes(b"keep")
    (tmp_path / "s" / "splits" / "ood__far__link.h5").symlink_to(outside / "keep.h5")
    code, out, err = run_cli(capsys, "import", _npz(tmp_path / "a.npz"), "--out",
                             tmp_path / "s", "--overwrite", "--quiet")
    assert code == 0, err
    assert (tmp_path / "s" / "NOTES.md").read_text() == "mine"
    assert (outside / "keep.h5").read_bytes() == b"keep"      # the link went, not its target
    assert Store.open(tmp_path / "s").splits() == ["id/train", "id/test"]


KILL_AT_MANIFEST = """
import os, signal, sys
import numpy as np
from featstore.store import store
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
store.atomic_write_json = die
store.Store.create(sys.argv[1], head=(np.eye(3, 8, dtype=np.float32), np.zeros(3, np.float32)))
"""


def test_kill_between_model_file_and_manifest_does_not_block_the_rerun(tmp_path, capsys):
    out = tmp_path / "s"
    proc = subprocess.run([sys.executable, "-c", KILL_AT_MANIFEST, str(out)], env=_env(),
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert (out / "model.h5").is_file() and not (out / "store.json").exists()
    code, _, err = run_cli(capsys, "import", _npz(tmp_path / "a.npz"), "--out", out, "--quiet")
    assert code == 0, err
    assert Store.open(out).splits() == ["id/train", "id/test"]
    assert Store.open(out).verify() == []


# ------------------------------------------------------------------------------ kill -9 stages
WRITER = """
import os, signal, sys, traceback
import numpy as np
from pathlib import Path
from featstore import Store
from featstore.store import store as S, writer as W

path, stage = Path(sys.argv[1]), sys.argv[2]

def die():
    os.kill(os.getpid(), signal.SIGKILL)

if stage == "part":          # a stale half-written part tmp, then the kill
    original = W.SplitWriter._write_part
    calls = []
    def write_part(self, arrays):
        calls.append(1)
        if len(calls) == 3:
            W.exclusive_tmp(self.part_path(self._part)).write_bytes(b"half a part")
            die()
        original(self, arrays)
    W.SplitWriter._write_part = write_part
elif stage == "assemble":    # a half-written split tmp
    def write_parts_file(path, parts, axes=None):
        path.write_bytes(b"half a split")
        die()
    W.write_parts_file = write_parts_file
elif stage == "commit":      # the split file renamed into place, the manifest not yet written
    original_update = S.Store.update_manifest
    def update_manifest(self, change):
        if any(f.name == "commit_split" for f in traceback.extract_stack()):
            die()
        original_update(self, change)
    S.Store.update_manifest = update_manifest
elif stage == "manifest":    # the manifest's tmp written, not renamed
    original_write = S.atomic_write_json
    def atomic_write_json(target, obj):
        if Path(target).name == "store.json" and obj["splits"].get("ood/far/x", {}).get(
                "complete"):
            (Path(target).parent / "store.json.tmp").write_text('{"half": ')
            die()
        original_write(target, obj)
    S.atomic_write_json = atomic_write_json

rng = np.random.default_rng(0)
n, d, c = 50, 6, 3
x = rng.normal(size=(n, d)).astype(np.float32)
w = rng.normal(size=(c, d)).astype(np.float32)
if not (path / "store.json").exists():
    Store.create(path, head=(w, np.zeros(c, np.float32)))
st = Store.open(path, mode="a")
writer = W.SplitWriter(st, "ood/far/x", part_rows=10, dtype="float32", usage="test",
                     source={"builtin": "noise"}, fingerprint={"v": 1}, num_rows=n)
for k in writer.missing_parts():
    lo, hi = writer.part_bounds(k)
    for s in range(lo, hi, 5):
        writer.append(first_row=s, source_rows=5, features=x[s:s + 5],
                      logits=x[s:s + 5] @ w.T, labels=np.full(5, -1),
                      ids=np.arange(s, s + 5).astype(str))
writer.finish()
"""


@pytest.mark.parametrize("stage", ["part", "assemble", "commit", "manifest"])
def test_kill9_at_each_write_stage_then_rerun_is_identical(tmp_path, stage):
    """SIGKILL inside each step of writing a split (a part, the assembly, the rename into
    place, the manifest): the split stays invisible, the rerun finishes it, and the file is
    byte-identical to an uninterrupted run's (reference: its sha256)."""
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    subprocess.run([sys.executable, str(script), str(tmp_path / "clean"), "none"], env=_env(),
                   check=True, timeout=120)
    victim = tmp_path / "victim"
    killed = subprocess.run([sys.executable, str(script), str(victim), stage], env=_env(),
                            timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert "ood/far/x" not in Store.open(victim).splits()
    subprocess.run([sys.executable, str(script), str(victim), "none"], env=_env(), check=True,
                   timeout=120)
    st = Store.open(victim)
    assert st.splits() == ["ood/far/x"] and st.verify() == []
    assert _sha(victim / "splits" / "ood__far__x.h5") == \
        _sha(tmp_path / "clean" / "splits" / "ood__far__x.h5")
    assert not (victim / "splits" / "ood__far__x.parts").exists()
    assert not list(victim.rglob("*.tmp"))


# ------------------------------------------------------------------------------ damaged parts
def _writer(st: Store, fingerprint: dict | None = None) -> SplitWriter:
    return SplitWriter(st, "ood/far/p", part_rows=10, dtype="float32", usage="test",
                       source={}, fingerprint=fingerprint or {"v": 1}, num_rows=40)


def _append_part(writer: SplitWriter, k: int, x: np.ndarray, w: np.ndarray) -> None:
    lo, hi = writer.part_bounds(k)
    writer.append(first_row=lo, source_rows=hi - lo, features=x[lo:hi], logits=x[lo:hi] @ w.T,
                  labels=np.full(hi - lo, -1), ids=np.arange(lo, hi).astype(str))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "no_features"])
def test_a_damaged_part_is_redone_not_fatal(tmp_path, damage):
    """A part file cut short, overwritten with junk, emptied or missing a dataset is deleted
    and redone on resume; the good parts are kept (same inode); the result equals an
    uninterrupted run (reference: write_split of the same arrays)."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    w = rng.normal(size=(2, 4)).astype(np.float32)
    head = (w, np.zeros(2, np.float32))
    ref = Store.create(tmp_path / "ref", head=head)
    ref.write_split("ood/far/p", features=x, logits=x @ w.T, labels=np.full(40, -1),
                    ids=np.arange(40).astype(str), source={})
    st = Store.create(tmp_path / "s", head=head)
    writer = _writer(st)
    for k in range(3):
        _append_part(writer, k, x, w)
    part1 = writer.part_path(1)
    if damage == "truncated":
        part1.write_bytes(part1.read_bytes()[:300])
    elif damage == "garbage":
        part1.write_bytes(b"\x00junk" * 100)
    elif damage == "empty":
        part1.write_bytes(b"")
    else:
        import h5py

        with h5py.File(part1, "r+") as fh:
            del fh["features"]
    inode0 = writer.part_path(0).stat().st_ino
    resumed = _writer(Store.open(tmp_path / "s", mode="a"))
    assert resumed.missing_parts() == [1, 3]
    assert resumed.part_path(0).stat().st_ino == inode0
    for k in resumed.missing_parts():
        _append_part(resumed, k, x, w)
    resumed.finish()
    assert _sha(tmp_path / "s/splits/ood__far__p.h5") == \
        _sha(tmp_path / "ref/splits/ood__far__p.h5")


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"", b"[1, 2]"])
def test_garbage_fingerprint_restarts_the_split_instead_of_blocking(tmp_path, content):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    w = rng.normal(size=(2, 4)).astype(np.float32)
    st = Store.create(tmp_path / "s", head=(w, np.zeros(2, np.float32)))
    writer = _writer(st)
    for k in range(2):
        _append_part(writer, k, x, w)
    (writer.parts_dir / FINGERPRINT).write_bytes(content)
    resumed = _writer(Store.open(tmp_path / "s", mode="a"))
    assert resumed.missing_parts() == [0, 1, 2, 3]     # parts of an unknown run are dropped
    for k in range(4):
        _append_part(resumed, k, x, w)
    split = resumed.finish()
    np.testing.assert_array_equal(np.asarray(split.features), x)


# ------------------------------------------------------------------------------ full disk
DISK_FULL = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG instead of death
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))
from cli.app import main
main(sys.argv[2:])
"""


def test_disk_full_is_a_clean_error_not_a_crash(tmp_path):
    """RLIMIT_FSIZE stands in for a full disk (a file may not grow past 200 kB): `import` of
    a 2 MB split exits 1 with one line naming the split and the bytes, never rc 139 (the
    segfault of issue 22), and leaves no store behind that claims the split."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", **{"head/weight": rng.normal(size=(3, 512)).astype(np.float32),
                                      "head/bias": np.zeros(3, np.float32),
                                      "id/test/features": rng.normal(size=(1000, 512))
                                      .astype(np.float32)})
    proc = subprocess.run([sys.executable, "-c", DISK_FULL, str(200_000), "import",
                           str(tmp_path / "big.npz"), "--out", str(tmp_path / "s")],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "split 'id/test' needs about" in lines[0], proc.stderr
    assert "free" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "store.json").exists()


def test_write_error_mid_split_leaves_the_split_incomplete(tmp_path, monkeypatch):
    """An OSError from HDF5 while writing (a full disk that the pre-check could not see) is
    raised as is to the caller, and the manifest never lists the split as complete."""
    import featstore.store.store as store_mod

    st = _small_store(tmp_path / "s")
    st = Store.open(tmp_path / "s", mode="a")

    def failing(path, **kwargs):
        Path(path).write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_mod, "write_split_file", failing)
    with pytest.raises(OSError, match="No space left"):
        st.write_split("ood/far/late", features=np.ones((3, SMALL["dim"]), np.float32))
    after = Store.open(tmp_path / "s")
    assert "ood/far/late" not in after.splits() and after.verify() == []
    assert not (tmp_path / "s/splits/ood__far__late.h5.tmp").exists()


def test_store_api_errors_are_featstore_errors():
    """The classes the CLI maps to exit codes: a lock conflict and a full disk exit 1."""
    from featstore.store.fileio import DiskFullError

    assert StoreLockedError("x").exit_code == 1 and DiskFullError("x").exit_code == 1
    assert issubclass(InputError, UsageError) and InputError("x").exit_code == 1
    assert issubclass(StoreLockedError, FeatstoreError)


def test_lock_is_reentrant_in_one_process_and_released(tmp_path):
    (tmp_path / "d").mkdir()
    with StoreLock(tmp_path / "d"), StoreLock(tmp_path / "d"):
        # the inner acquisition did not block; the lock file names this process as holder
        holder = json.loads((tmp_path / "d" / ".featstore.lock").read_text())
        assert holder["pid"] == os.getpid()
    probe = textwrap.dedent("""
        import sys
        from featstore.store.lock import StoreLock
        with StoreLock(sys.argv[1]):
            print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "d")], env=_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


PART_PAST_LIMIT = """
import resource, signal, sys
import numpy as np
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from featstore import Store
from featstore.store import writer as W
W.check_space = lambda *a, **k: None            # no pre-check: the write itself must fail
st = Store.create(sys.argv[1], head=(np.eye(3, 256, dtype=np.float32), np.zeros(3, np.float32)))
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
writer = W.SplitWriter(st, "ood/far/x", part_rows=200, dtype="float32", usage="test", source={},
                       fingerprint={}, num_rows=200)
x = np.ones((200, 256), np.float32)
try:
    writer.append(first_row=0, source_rows=200, features=x, logits=x[:, :3],
                  labels=np.full(200, -1), ids=np.arange(200).astype(str))
except OSError as exc:
    print("clean", exc.errno)
"""


def test_a_part_write_past_the_limit_fails_cleanly_without_the_precheck(tmp_path):
    """A part is built in memory and written with plain writes: a full disk (here EFBIG from
    RLIMIT_FSIZE, with the free-space pre-check switched off) is an OSError the extractor
    reports, and the process exits normally (issue 22: rc 139 inside h5py)."""
    proc = subprocess.run([sys.executable, "-c", PART_PAST_LIMIT, str(tmp_path / "s")],
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.split() == ["clean", "27"]               # EFBIG
    assert not list((tmp_path / "s" / "splits").rglob("part-*.h5"))
