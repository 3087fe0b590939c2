"""The Python bodies of the extension's PL/Python functions, as MADlib lays them out: thin SQL
wrappers in ``extension/learnedidx--0.1.sql`` over modules of one concern each, tested here
directly (tests/indb/test_udf.py) and through SQL.

* :mod:`.catalog`: what the SQL functions and the server agree on: the built-in algorithms
  and their output tables' columns;
* :mod:`.args`: the training functions' arguments, checked (docs/indb.md says which checks
  are this layer's and which the server's);
* :mod:`.selectlist`: SQL select lists split into items, identifiers;
* :mod:`.madlib_params`: MADlib's ``name=value, ...`` parameter strings (values and lists);
* :mod:`.outputs`: an output table's rows and its summary table, from the server's reply;
* :mod:`.regress`: linregr's statistics, by the extension's ``linregr_final`` on the server's
  R-factor states;
* :mod:`.help`: the help texts of the training and prediction functions (``fn('usage')``);
* :mod:`.session`: the PL/Python session: prepared statements, errors raised as PostgreSQL's;
* :mod:`.grouped`: a grouped call's stream and its groups, in one statement;
* :mod:`.train`: the training driver, ``learnedidx._train_impl``;
* :mod:`.shards`: training over a partitioned table's postgres_fdw shards: the coordinator's
  merge and the shard's pass (``learnedidx._shard_state``);
* :mod:`.svm`: MADlib's svm functions (through the driver), with :mod:`.svm_params` (their
  arguments) and :mod:`.svm_kernels` (their kernels' random features, drawn as MADlib draws them).

These modules run inside the database server, in the PL/Python interpreter of a backend:
they import the standard library, :mod:`learnedidx.errors`, :mod:`learnedidx.checks` and each
other only (tests/indb/test_layers.py checks it), and take ``plpy`` as an argument.
``learnedidx pg install`` installs them, with those two modules, beside the extension
(``SHAREDIR/learnedidx/python``), whatever Python environment the package itself lives in; a
PL/Python function finds them there through ``learnedidx._python_path()`` (its prologue, the
same in every function of the script; docs/indb.md, "How the PL/Python functions find their
modules").

To add a function: its module function here (arguments first checked by :mod:`.args`), a
test of it in tests/indb/test_udf.py, and in the SQL script a ``plpython3u`` function whose
body is the prologue and one call.
"""
