"""The conformance suite shipped with specverify: ``pytest --pyargs specverify.suite``."""
