"""The built-in losses, advantage estimators and optimizers (registered as plugins, like anyone's)."""
