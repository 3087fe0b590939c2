"""The C modules of the Python package; everything else is configured in pyproject.toml.

The store's get and put called from C (learnedidx/index/_methods.c) and its group arrays
in huge pages (learnedidx/index/_pages.c).  Both optional: built without a C compiler, the
package runs the same methods in Python on numpy's arrays and lists."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("learnedidx.index._methods", ["learnedidx/index/_methods.c"], optional=True),
                   Extension("learnedidx.index._pages", ["learnedidx/index/_pages.c"], optional=True)])
