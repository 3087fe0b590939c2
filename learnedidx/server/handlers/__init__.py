"""The server's request handlers, one module per family of operations (see
:mod:`learnedidx.server.registry`): ``builtin`` (``health``, ``stats``), ``train``
(``train.full``, ``train.incremental`` on the server's device), ``indb`` (``indb.*``,
in-database training)."""
