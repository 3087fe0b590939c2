"""Where Numba keeps compiled kernels (``cache=True``) when it cannot choose on its own.

Numba caches next to the source (``__pycache__``) or in the user's cache directory
(``~/.cache/numba``); a user who can write neither (a package installed by root, no home
directory) gets "cannot cache function ...: no locator available" when the first kernel
module is imported.  :func:`configure`, run when ``learnedidx`` is imported (before any
kernel), leaves a set ``NUMBA_CACHE_DIR`` and Numba's own choice alone, and otherwise points
Numba at ``<temporary directory>/learnedidx-numba-<uid>``: created mode 0700 and used only
when it is a directory (not a link) owned by this user that no one else can write, since
Numba loads what it finds there as code.  Failing that, a fresh private directory, removed
at exit (kernels are then compiled by every process).

Numba keys a cached kernel on its own source file only, but the kernels inline functions
and constants of other modules (the index's layout, its searches): a kernel cached before
one of those changed would be loaded unchanged and read the index wrongly.
:func:`stamp_kernels` makes every cached kernel of the package depend on all of its
sources: a change to any of them compiles the package's kernels again.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _usable(directory: Path) -> bool:
    """Whether Numba could cache in ``directory`` (its own test: create it, write a file)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
        return True
    except OSError:
        return False


def _numba_finds_a_place() -> bool:
    """Whether Numba's own locators work for every kernel module of the package: next to
    the sources, or in the user's cache directory (as Numba's appdirs computes it on Linux)."""
    if all(_usable(d / "__pycache__") for d in {p.parent for p in PACKAGE.rglob("*.py")}):
        return True
    user_cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return _usable(Path(user_cache) / "numba")


def private_dir(base: str | os.PathLike) -> str:
    """``base/learnedidx-numba-<uid>`` if it is (or can be made) a directory owned by this
    user, of mode 0700, not a link; else a fresh private directory, removed at exit."""
    d = Path(base) / f"learnedidx-numba-{os.getuid()}"
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    except OSError:
        d = None  # type: ignore[assignment]
    if d is not None:
        st = os.lstat(d)
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
            return str(d)
    fresh = tempfile.mkdtemp(prefix="learnedidx-numba-")
    atexit.register(shutil.rmtree, fresh, True)
    return fresh


def source_digest(root: Path = PACKAGE) -> str:
    """A digest of every Python source under ``root`` (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def stamp_kernels(root: Path = PACKAGE) -> bool:
    """Make the cache of every kernel defined under ``root`` valid only for the sources
    there now: Numba's cache locators, each in a form that serves only files under
    ``root`` and adds :func:`source_digest` to the stamp Numba checks before loading.
    False when this Numba has no such locators to extend (kernels then stay keyed on
    their own files)."""
    try:
        from numba.core.caching import CacheImpl, _CacheLocator
        classes = list(CacheImpl._locator_classes)
    except (ImportError, AttributeError):
        return False
    if not all(isinstance(c, type) and issubclass(c, _CacheLocator) for c in classes):
        return False
    digest = source_digest(root)
    top = str(root) + os.sep

    def stamped(base: type) -> type:
        class Stamped(base):  # type: ignore[misc, valid-type]
            _learnedidx_root = top

            @classmethod
            def from_function(cls, py_func, py_file):
                if not os.path.abspath(py_file).startswith(top):
                    return None
                return super().from_function(py_func, py_file)

            def get_source_stamp(self):
                return super().get_source_stamp(), digest

        Stamped.__name__ = Stamped.__qualname__ = f"LearnedIdx{base.__name__}"
        return Stamped

    numbas = [c for c in classes if not hasattr(c, "_learnedidx_root")]  # a former call's are replaced
    CacheImpl._locator_classes = [stamped(c) for c in numbas] + numbas
    return True


def configure() -> str | None:
    """Stamp the package's kernels (:func:`stamp_kernels`) and set ``NUMBA_CACHE_DIR``
    when Numba would find no place to cache; the directory chosen, or None when Numba's own
    choice stands."""
    stamp_kernels()
    if os.environ.get("NUMBA_CACHE_DIR") or _numba_finds_a_place():
        return None
    d = private_dir(tempfile.gettempdir())
    os.environ["NUMBA_CACHE_DIR"] = d  # child processes (the server) inherit it
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before learnedidx: its configuration was read already
        numba.config.CACHE_DIR = d
    return d
