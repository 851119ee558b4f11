"""Tiered storage: closed ledgers copied to an object store in Pulsar's block format and read
back from it (``docs/tiered-storage.md``). Import the submodules: ``object_store`` and
``offloader`` load obstore, which a broker without offload does not need at start-up."""
