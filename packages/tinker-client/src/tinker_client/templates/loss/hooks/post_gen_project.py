"""Keep only the chosen variant's files: tinker_client.new_hooks.keep_variant."""
from tinker_client.new_hooks import keep_variant

keep_variant({{ cookiecutter.loss_kind | jsonify }})
