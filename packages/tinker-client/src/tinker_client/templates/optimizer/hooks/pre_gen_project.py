"""Refuse bad answers before anything is written: tinker_client.new_hooks.check_answers."""
from tinker_client.new_hooks import check_answers

check_answers({{ cookiecutter | jsonify | tojson }})
