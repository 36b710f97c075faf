"""A module without load_environment."""

VALUE = 1
