"""Built-in sources and sinks: connectors a definition names instead of shipping a package
(``archive``/``className`` ``builtin://datagen``, or ``--source-type datagen`` in
pulsar-admin's spelling). See :mod:`magnetar.functions.connectors.registry`."""
