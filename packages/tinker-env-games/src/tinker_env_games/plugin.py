"""Entry point module (filled in by the package's issue)."""
