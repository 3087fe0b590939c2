"""Numba's cache for any user (learnedidx/jitcache.py): one who can write neither the
package's directory nor a home directory still opens a store, and the directory chosen for
them is private."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from learnedidx import jitcache

CODE = "import os, learnedidx; db = learnedidx.open(); db.put(b'a', b'1'); print(db.get(b'a'), os.environ['NUMBA_CACHE_DIR'])"


@pytest.mark.skipif(os.access(jitcache.PACKAGE / "index", os.W_OK),
                    reason="this user can write the package directory: Numba caches there")
def test_a_user_who_can_write_neither_the_package_nor_a_home_opens_a_store(tmp_path):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    value, cache = out.stdout.split()
    assert value == "b'1'" and cache == str(tmp_path / f"learnedidx-numba-{os.getuid()}")
    st = os.lstat(cache)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid() and os.listdir(cache)


@pytest.mark.parametrize("plant", ["world-writable", "symlink", "file"])
def test_a_cache_directory_someone_else_could_have_planted_is_not_used(tmp_path, plant):
    """Numba loads its cache files as code: a directory others can write is never used."""
    name = tmp_path / f"learnedidx-numba-{os.getuid()}"
    if plant == "world-writable":
        name.mkdir()
        name.chmod(0o777)
    elif plant == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        name.symlink_to(tmp_path / "elsewhere")
    else:
        name.write_bytes(b"")
    chosen = jitcache.private_dir(tmp_path)
    assert chosen != str(name) and "learnedidx-numba-" in chosen
    st = os.lstat(chosen)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()


def test_the_private_directory_is_reused_and_a_set_cache_dir_left_alone(tmp_path, monkeypatch):
    first = jitcache.private_dir(tmp_path)
    assert first == str(tmp_path / f"learnedidx-numba-{os.getuid()}") == jitcache.private_dir(tmp_path)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert jitcache.configure() is None and os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine")


PROBE = """
import numpy as np
from learnedidx.index import foldin
foldin.key_prefix(np.array([0, 2, 4], np.int64), np.frombuffer(b"abac", np.uint8), 2)
s = foldin.key_prefix.stats
print(sum(s.cache_hits.values()), sum(s.cache_misses.values()))
"""


def test_a_kernel_is_compiled_again_when_another_source_of_the_package_changes(tmp_path):
    # foldin's kernels inline the layout's functions and constants: a cached kernel must
    # not outlive a change to layout.py, though foldin.py itself is unchanged.
    import shutil
    pkg = tmp_path / "pkg"
    shutil.copytree(jitcache.PACKAGE, pkg / "learnedidx", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(pkg), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def probe() -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600,
                             cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        hits, misses = out.stdout.split()
        return int(hits), int(misses)

    assert probe() == (0, 1)  # compiled and cached
    assert probe() == (1, 0)  # loaded from the cache
    with open(pkg / "learnedidx" / "index" / "layout.py", "a") as f:
        f.write("\n# changed\n")
    assert probe() == (0, 1)  # compiled again
    assert probe() == (1, 0)


def test_the_digest_covers_every_source_by_name_and_content(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    d0 = jitcache.source_digest(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")  # same size
    d1 = jitcache.source_digest(tmp_path)
    (tmp_path / "sub" / "b.py").rename(tmp_path / "sub" / "c.py")
    d2 = jitcache.source_digest(tmp_path)
    assert len({d0, d1, d2}) == 3
