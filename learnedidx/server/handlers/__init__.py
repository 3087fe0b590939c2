"""Request handlers of the accelerator server, one module per area (see ``registry.HANDLER_MODULES``)."""
