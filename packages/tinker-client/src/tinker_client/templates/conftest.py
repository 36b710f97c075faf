"""Keep pytest out of the cookiecutter templates.

The template trees hold tests with Jinja placeholders; they are valid Python only after
``opentinker new`` renders them (integration-tests/test_templates.py bakes and runs them).
"""

collect_ignore_glob = ["*"]
