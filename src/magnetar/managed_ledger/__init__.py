"""The managed ledger: a topic's log over a list of ledgers, with durable cursors.

See ``docs/managed_ledger.md``. Sans-IO cores: :mod:`.position`, :mod:`.range_set`,
:mod:`.ledger_list`, :mod:`.cursor`.
"""
