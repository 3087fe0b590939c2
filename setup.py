"""The packages and the C modules of the Python package; everything else is configured in
pyproject.toml.

The packages are found: every directory of learnedidx/ (data-only ones, such as
workloads/ycsb_workloads, as namespace packages, so that setuptools ships their data), and
the PostgreSQL extension's directory, extension/, as learnedidx._extension with its
regression suite (pyproject.toml maps the directory).

The C modules: the store's get and put called from C (learnedidx/index/_methods.c) and its
group arrays in huge pages (learnedidx/index/_pages.c).  Both optional: built without a C
compiler, the package runs the same methods in Python on numpy's arrays and lists."""
from setuptools import Extension, find_namespace_packages, setup

EXTENSION = ["learnedidx._extension"] + [f"learnedidx._extension.{p}"
                                         for p in find_namespace_packages("extension", exclude=["*__pycache__*"])]

setup(packages=find_namespace_packages(include=["learnedidx", "learnedidx.*"], exclude=["*__pycache__*"]) + EXTENSION,
      ext_modules=[Extension("learnedidx.index._methods", ["learnedidx/index/_methods.c"], optional=True),
                   Extension("learnedidx.index._pages", ["learnedidx/index/_pages.c"], optional=True)])
