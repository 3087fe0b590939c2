"""The compiler of a small Python-embedded DSL for training algorithms (the four built-ins of
:mod:`learnedidx.indb.runtime.builtins` are written in it too); :mod:`learnedidx.indb.runtime`
runs what it compiles.

An algorithm is a few lines of restricted Python in one of three shapes:

**SGD** (a per-tuple gradient; the engine threads' models are merged every epoch)::

    epochs = 30                 # passes over the data
    learning_rate = 0.5         # initial step size
    schedule = "invscaling"     # constant | invscaling (lr/sqrt(t)) | inverse (lr/(1+lr*l2*t)) | step
    batch_size = 32             # mini-batch size per engine thread
    merge = "average"           # merge of the engine threads' models per epoch: average | sum
    tolerance = 1e-6            # stop when the epoch loss changes less than this

    def gradient(w, x, y):      # per-tuple gradient of the loss at model w
        return (sigmoid(dot(w, x)) - y) * x

    def loss(w, x, y):          # optional, per-tuple loss for convergence and reporting
        z = dot(w, x)
        return log1p(exp(-abs(z))) + max(z, 0.0) - y * z

**Accumulators and an update** (closed forms, Newton): each ``acc_<name>(w, x, y)`` returns
a number, vector or matrix per tuple; the engine sums it over every tuple (each thread its
partition, then the threads' sums) and, once per epoch, ``update(w, n, <name>...)`` (plain
Python over the sums, may call ``solve``, ``lstsq``, ``eye``) returns the next model
(linear regression: ``acc_xx`` returns ``outer(x, x)``, ``acc_xy`` returns ``y * x``, and
``update(w, xx, xy)`` returns ``lstsq(xx, xy)``; see :mod:`learnedidx.indb.runtime.builtins`).

**Factors** (row/column-indexed parameters, e.g. matrix factorization on (row, col, value)
tuples): ``gradient_u(u, v, y)`` and ``gradient_v(u, v, y)`` are the gradients for the
tuple's row factor ``u = U[row]`` and column factor ``v = V[col]`` (``rank`` columns each,
initialised from N(0, ``init_scale``)); the threads' factor matrices are averaged per epoch.

``w`` is the model (a vector with the intercept first), ``x`` the tuple's features with a
leading 1, ``y`` its label (``labels = "binary"`` checks 0/1 labels, ``"signed"`` maps two
label values to -1/+1).  Allowed: arithmetic, comparisons, ``a if c else b``, local
assignments, and the functions in :data:`.functions.FUNCTIONS` (plus
:data:`.functions.UPDATE_FUNCTIONS` in ``update``).  Anything else (imports, attribute
access, loops, other names) is rejected, so source text registered from SQL cannot run
arbitrary code in the server.  The per-tuple functions compile into nogil Numba kernels, one
per algorithm and shape (:mod:`.kernels`), and into the cycle model
(:class:`learnedidx.accel.engine_model.KernelCost`).
"""
from __future__ import annotations

from learnedidx.indb.dsl.compiler import Algorithm, compile_algorithm
from learnedidx.indb.dsl.settings import settings_for

__all__ = ["Algorithm", "compile_algorithm", "settings_for"]
