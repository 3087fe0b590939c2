"""The PostgreSQL extension's files (control file, install scripts, PGXS Makefile), shipped in
the wheel as package data of ``learnedidx._extension`` and installed by ``learnedidx pg install``
(:mod:`learnedidx.indb.install`)."""
