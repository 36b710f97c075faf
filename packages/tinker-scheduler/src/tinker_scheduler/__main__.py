"""``python -m tinker_scheduler start|add-tenant ...``: the scheduler commands without the
``opentinker`` CLI (which adds the same commands as ``opentinker scheduler ...``)."""

from tinker_scheduler.cli import main

if __name__ == "__main__":
    main()
