"""The one C module of the Python package; everything else is configured in pyproject.toml.

The store's get and put called from C (learnedidx/index/_methods.c).  Optional: built
without a C compiler, the package runs the same methods in Python."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("learnedidx.index._methods", ["learnedidx/index/_methods.c"], optional=True)])
