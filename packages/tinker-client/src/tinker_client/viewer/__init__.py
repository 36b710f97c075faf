"""``opentinker view RUN_DIR...``: a local web viewer of run dirs (curves, rollouts, eval
transcripts, config, checkpoints, the phase breakdown), which follows a run while it trains.

- :mod:`tinker_client.viewer.data`: reading run dirs incrementally (no FastAPI needed);
- :mod:`tinker_client.viewer.lineage`: which served run was forked from which (``lineage.json``);
- :mod:`tinker_client.viewer.app`: the FastAPI app and its JSON API (``tinker-client[view]``);
- :mod:`tinker_client.viewer.command`: the ``view`` command and :func:`~tinker_client.viewer.command.serve`;
- ``static/``: the page (vanilla JavaScript, no build step, nothing from a CDN).

Importing this package imports neither FastAPI nor uvicorn: the command checks for them and
names the extra to install. See docs/guides/viewer.md.
"""
