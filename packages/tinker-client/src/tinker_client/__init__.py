"""tinker-client: the thin OpenTinker SDK and the ``opentinker`` command line (no torch)."""

__version__ = "0.1.0"
