"""The ``opentinker`` plugin of tinker-serve (its CLI command is added here)."""
