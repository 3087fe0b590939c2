"""The extension ships as package data: a built wheel holds it (and every package of the
source tree), ``learnedidx pg install`` from an installed wheel installs it into a
PostgreSQL installation where ``CREATE EXTENSION`` works, it installs exactly what PGXS's
``make install`` installs from a copy of the package data, and ``learnedidx pg installcheck``
from an installed wheel runs the regression suite (``make installcheck``) the package holds."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import psycopg
import pytest

from learnedidx.indb import install
from learnedidx.indb.cluster import TempCluster
from tests.indb.test_sql_regression import CASES, PG_CONFIG, REPO, pgxs_or_skip

#: The extension's files, as the package ships them: control file, script, C sources and
#: header, Makefile, the regression suite.
EXTENSION_FILES = sorted(p.relative_to(REPO / "extension").as_posix() for pattern in install.SOURCES
                         for p in (REPO / "extension").glob(pattern))


_BUILD_LOG: list[str] = []


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the source tree (the suite may run from a read-only
    checkout), offline: with this environment's setuptools, no build isolation; the build's
    output is kept (``_BUILD_LOG``)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    for d in ("learnedidx", "extension"):
        shutil.copytree(REPO / d, src / d, ignore=shutil.ignore_patterns("__pycache__", "results", "regression.*", "*.so"))
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
                          "--disable-pip-version-check", "-v", "-w", str(out), str(src)],
                         check=True, capture_output=True, text=True, timeout=300)
    _BUILD_LOG.append(res.stdout + res.stderr)
    (whl,) = out.glob("learnedidx-*.whl")
    return whl


def _data_files() -> set[str]:
    """Every file of the source tree the package ships that is not Python (as the wheel
    names them): workload files, the SIndex driver's source, the extension's files."""
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "learnedidx").rglob("*") if p.is_file()
               and "__pycache__" not in p.parts and p.suffix not in (".py", ".so", ".c")}
    return package | {f"learnedidx/_extension/{f}" for f in EXTENSION_FILES}


def test_the_wheel_holds_the_extension_every_module_and_every_data_file(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in EXTENSION_FILES:
            assert z.read(f"learnedidx/_extension/{f}") == (REPO / "extension" / f).read_bytes()
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "learnedidx").rglob("*.py")}
    assert modules - names == set()  # a package setup.py did not find would be missing here
    data = _data_files()
    assert {"learnedidx/workloads/ycsb_workloads/workloada", "learnedidx/workloads/sindex_driver.cc",
            "learnedidx/py.typed", "learnedidx/_extension/sql/predict.sql"} <= data
    assert data - names == set()
    # the store's compiled methods, built from their C source (the build has a compiler)
    assert any(n.startswith("learnedidx/index/_methods.") and n.endswith(".so") for n in names)
    # data reach the wheel as their packages' declared data, not by a behaviour setuptools
    # has announced it will drop ("Package ... is absent from the `packages` configuration")
    assert "would be ignored" not in _BUILD_LOG[0] and "absent from the `packages`" not in _BUILD_LOG[0]


def test_package_data_is_what_the_extension_directory_holds():
    assert install.data_files() == ["learnedidx.control", "learnedidx--0.1.sql"]
    assert {"learnedidx.h", "learnedidx.c", "offload.c", "sql/predict.sql", "expected/predict.out"} <= \
        set(EXTENSION_FILES)
    # every file of the directory but the Python package marker is the extension's
    assert {p.relative_to(REPO / "extension").as_posix() for p in (REPO / "extension").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts} - set(EXTENSION_FILES) == {"__init__.py"}
    with install.source_tree() as src:
        files = sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
        assert [f for f in files if not f.startswith("python/")] == EXTENSION_FILES
        for f in EXTENSION_FILES:
            assert (src / f).read_bytes() == (REPO / "extension" / f).read_bytes()
        # the PL/Python functions' modules, copies of the package's, under stubs of its packages
        stubs = {"python/learnedidx/__init__.py", "python/learnedidx/indb/__init__.py"}
        modules = {p.relative_to(REPO).as_posix() for p in [REPO / "learnedidx" / "errors.py",
                                                           REPO / "learnedidx" / "checks.py",
                                                           *(REPO / "learnedidx" / "indb" / "udf").glob("*.py")]}
        assert {f for f in files if f.startswith("python/")} == stubs | {f"python/{m}" for m in modules}
        for m in modules:
            assert (src / "python" / m).read_bytes() == (REPO / m).read_bytes()
        for stub in stubs:
            assert (src / stub).read_text() == install.PYTHON_STUB


def _pg_config(flag: str) -> Path:
    return Path(install.pg_config(str(PG_CONFIG), flag))


def _pg_root() -> Path:
    """The directory PostgreSQL's installation lives under (its binaries, modules, share
    directory and headers)."""
    dirs = [_pg_config(f) for f in ("--bindir", "--pkglibdir", "--sharedir", "--includedir-server")]
    return Path(os.path.commonpath(dirs + [_pg_config("--pkgincludedir") / "internal"]))


def _copy_postgres(dst: Path) -> Path:
    """A relocated copy of the PostgreSQL installation (binaries, modules, share directory and
    the server's headers, which PostgreSQL and PGXS find relative to the binaries) without
    learnedidx's files.  Returns the copy's pg_config."""
    dirs = [_pg_config(f) for f in ("--bindir", "--pkglibdir", "--sharedir", "--includedir-server")]
    dirs.append(_pg_config("--pkgincludedir") / "internal")  # PGXS adds it to the include path
    root = _pg_root()
    for d in dirs:
        shutil.copytree(d, dst / d.relative_to(root), symlinks=True,
                        ignore=shutil.ignore_patterns("bitcode", "learnedidx*"))
    # libpq's headers (Debian's libpq-dev, which postgresql-server-dev-15 depends on): shards.c
    # calls postgres_fdw's connections, as contrib/postgres_fdw does
    inc = _pg_config("--includedir")
    for h in ("libpq-fe.h", "postgres_ext.h", "pg_config_ext.h"):
        shutil.copy2(inc / h, dst / inc.relative_to(root) / h)
    return dst / _pg_config("--bindir").relative_to(root) / "pg_config"


@pytest.fixture(scope="module")
def wheel_venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel pip-installed (its dependencies from this environment);
    returns the venv."""
    venv = tmp_path_factory.mktemp("wheel-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--no-deps",
                    "--no-index", "--no-cache-dir", "--disable-pip-version-check", "-q", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    # The dependencies come from this environment (a path entry, after the venv's own site).
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    where = subprocess.run([python, "-c", "import learnedidx.indb.install as i; "
                            "print(i.__file__); print(i.package_files())"],
                           check=True, capture_output=True, text=True, cwd=venv).stdout.split()
    assert all(Path(w).is_relative_to(site) for w in where), where  # the wheel's copy, not the checkout
    return venv


def test_the_installed_wheel_opens_every_data_file_the_code_opens(wheel_venv, tmp_path):
    """From a fresh venv holding the wheel only: every built-in YCSB workload loads, ``ycsb run
    -w A`` runs, the SIndex driver's source is there to build, and the extension's package
    data makes a source tree (what pg install and installcheck run in)."""
    code = ("import json; from learnedidx.workloads.spec import BUILTIN, load_properties; "
            "from importlib import resources; from learnedidx.indb import install; "
            "assert (resources.files('learnedidx.workloads') / 'sindex_driver.cc').is_file(); "
            "ctx = install.source_tree(); src = ctx.__enter__(); "
            "print(json.dumps({'workloads': {k: load_properties(k) for k in BUILTIN}, "
            "'scripts': sorted(p.name for p in src.rglob('*.sql')), 'make': src.joinpath('Makefile').is_file()}))")
    out = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    from learnedidx.workloads.spec import BUILTIN, load_properties

    got = json.loads(out.stdout)
    assert got["workloads"] == {k: load_properties(k) for k in BUILTIN}  # the checkout's files, read here
    assert got["scripts"] == sorted(["learnedidx--0.1.sql"] + [c.name for c in CASES]) and got["make"]
    res = subprocess.run([str(wheel_venv / "bin" / "learnedidx"), "ycsb", "run", "-w", "A", "--records", "50",
                          "--operations", "50", "--peer", "sorteddict", "--mode", "per-op"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 0 and "[OVERALL], RunTime(ms)" in res.stdout, res.stderr


def test_pg_install_from_an_installed_wheel(wheel_venv, tmp_path):
    """pip install of the wheel into a fresh venv, then that venv's ``learnedidx pg install``
    into a copy of the PostgreSQL installation: CREATE EXTENSION learnedidx CASCADE works."""
    if os.geteuid() == 0:
        pytest.skip("PostgreSQL cannot run as root")
    venv = wheel_venv

    pg_config = _copy_postgres(tmp_path / "pg")
    sharedir = Path(install.pg_config(str(pg_config), "--sharedir")) / "extension"
    assert sharedir.is_relative_to(tmp_path) and not (sharedir / "learnedidx.control").exists()
    res = subprocess.run([str(venv / "bin" / "learnedidx"), "pg", "install", "--pgconfig", str(pg_config)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    for f in ("learnedidx.control", "learnedidx--0.1.sql"):
        assert f"installed {sharedir / f}" in res.stdout
        assert (sharedir / f).read_bytes() == (REPO / "extension" / f).read_bytes()
    assert (Path(install.pg_config(str(pg_config), "--pkglibdir")) / "learnedidx.so").is_file()

    with TempCluster(str(pg_config.parent), settings={"shared_buffers": "32MB", "max_wal_size": "64MB"}) as c:
        with psycopg.connect(c.conninfo, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION learnedidx CASCADE")
            version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'learnedidx'").fetchone()
            assert version == ("0.1",)
            # the C module loads: its GUC exists once a function of it has run
            conn.execute("SELECT learnedidx.predict(NULL, NULL)")
            assert conn.execute("SELECT current_setting('learnedidx.socket', true) IS NOT NULL").fetchone() == (True,)
            # The training functions' Python runs in the server's own interpreter, which has no
            # path to the venv: it imports the modules installed beside the extension.
            python = install.python_dir(str(pg_config))
            assert conn.execute("SELECT learnedidx._python_path()").fetchone() == (str(python),)
            with pytest.raises(psycopg.errors.InvalidParameterValue) as e:
                conn.execute("SELECT * FROM learnedidx.linregr_train('t', 'm', ' ', 'x')")
            assert e.value.diag.message_primary == "dep must not be empty"
            conn.execute("CREATE FUNCTION pg_temp.module_file(name text) RETURNS text LANGUAGE plpython3u "
                         "AS $$import sys; return sys.modules[name].__file__$$")
            for module in ("learnedidx.indb.udf.train", "learnedidx.errors", "learnedidx.checks"):
                where = conn.execute("SELECT pg_temp.module_file(%s)", (module,)).fetchone()[0]
                assert Path(where).is_relative_to(python), where
            assert conn.execute("SELECT pg_temp.module_file('learnedidx')").fetchone()[0] == \
                str(python / "learnedidx" / "__init__.py")  # the stub, not the package's own


@pytest.mark.postgres
def test_installcheck_runs_from_an_installed_wheel(wheel_venv, postgresql_proc, accel_server, tmp_path):
    """``learnedidx pg installcheck`` of the wheel's venv runs PGXS's ``make installcheck``
    (pg_regress) on the package's own copy of the suite: every script of extension/sql passes
    against the session's cluster (its installation has the extension)."""
    pgxs_or_skip()
    env = {**os.environ, "PGHOST": postgresql_proc.host, "PGPORT": str(postgresql_proc.port),
           "PGUSER": postgresql_proc.user, "LEARNEDIDX_SOCKET": accel_server.socket_path}
    res = subprocess.run([str(wheel_venv / "bin" / "learnedidx"), "pg", "installcheck", "--pgconfig", str(PG_CONFIG)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert res.returncode == 0, res.stdout
    for case in CASES:
        assert re.search(rf"\b{case.stem}\s+\.\.\. ok\b", res.stdout), res.stdout
    assert len(re.findall(r"\.\.\. ok\b", res.stdout)) == len(CASES) > 0
    assert list(tmp_path.iterdir()) == []  # pg_regress wrote its results into the copy, not here


def test_installcheck_reports_a_failing_script(tmp_path):
    """A suite that fails exits non-zero with pg_regress's diffs: here no server answers."""
    pgxs_or_skip()
    env = {**os.environ, "PGHOST": str(tmp_path), "PGPORT": "1"}
    res = subprocess.run([sys.executable, "-m", "learnedidx.cli", "pg", "installcheck", "--pgconfig", str(PG_CONFIG)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert re.search(r"connection to server on socket .* failed", res.stdout), res.stdout


def test_pg_install_installs_what_make_install_installs(tmp_path):
    """PGXS ``make install`` from a copy of the package data, and ``learnedidx pg install``,
    put the same files with the same modes into the module and extension directories."""
    pgxs_or_skip()
    with install.source_tree() as src:
        subprocess.run(["make", "-C", str(src), "install", f"PG_CONFIG={PG_CONFIG}", "with_llvm=no",
                        f"DESTDIR={tmp_path / 'pgxs'}"], check=True, capture_output=True, text=True, timeout=300)
    pg_config = _copy_postgres(tmp_path / "pg")
    installed = install.install(str(pg_config))
    pgxs = tmp_path / "pgxs" / _pg_root().relative_to("/")  # DESTDIR + the installation's own place
    theirs = {p.relative_to(pgxs): p for p in pgxs.rglob("*") if p.is_file()}
    ours = {p.relative_to(tmp_path / "pg"): p for p in installed}
    assert sorted(ours) == sorted(theirs)
    assert {p.name for p in ours} >= {"learnedidx--0.1.sql", "learnedidx.control", "learnedidx.so", "train.py"}
    assert all(p.is_file() for p in installed)
    for rel, p in ours.items():
        assert stat.S_IMODE(p.stat().st_mode) == stat.S_IMODE(theirs[rel].stat().st_mode)
        if p.suffix != ".so":  # the module's debug info names the directory it was built in
            assert p.read_bytes() == theirs[rel].read_bytes()
    assert {p.parent for p in installed if p.name == "train.py"} == {install.python_dir(str(pg_config)) / "learnedidx"
                                                                     / "indb" / "udf"}
    # readable by the database's OS user, whoever installed them
    assert {stat.S_IMODE(p.stat().st_mode) for p in installed if p.suffix == ".py"} == {0o644}


def test_make_install_in_a_checkout_stops_for_want_of_the_python_modules(tmp_path):
    """extension/ of a checkout has no python/: make install says how to install instead."""
    pgxs_or_skip()
    shutil.copytree(REPO / "extension", tmp_path / "extension", ignore=shutil.ignore_patterns("__pycache__"))
    res = subprocess.run(["make", "-C", str(tmp_path / "extension"), "install-python", f"PG_CONFIG={PG_CONFIG}",
                          f"DESTDIR={tmp_path / 'dest'}"], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "install with learnedidx pg install" in res.stderr, res.stderr
    assert not (tmp_path / "dest").exists()


def test_pg_install_refuses_a_pg_config_that_does_not_run(tmp_path):
    res = subprocess.run([sys.executable, "-m", "learnedidx.cli", "pg", "install", "--pgconfig",
                          str(tmp_path / "missing")], capture_output=True, text=True)
    assert res.returncode == 1 and "cannot run" in res.stderr and "Traceback" not in res.stderr
