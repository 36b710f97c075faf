"""The scheduler side of ``test_two_nodes.py``, run inside the first network namespace: a
scheduler joined to the namespaces' Ray cluster runs one distributed job; this script reports
its first step (the test then kills the second node) and its end, as JSON files in ``OUT``.

Usage: python netns_driver.py RAY_ADDRESS OUT_DIR CONFIG_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tinker_scheduler import Scheduler
from tinker_scheduler.config import DEFAULT_RUNNER
from tinker_scheduler.testing import JobStub


def main(ray_address: str, out: Path, config: str) -> None:
    scheduler = Scheduler(
        port=0, db=out / "jobs.db", runs_dir=out / "runs", runner=DEFAULT_RUNNER, ray_address=ray_address,
        tick_s=0.1, shutdown_timeout=30.0,
    ).start()
    try:
        with JobStub(scheduler.address) as client:
            job = client.submit(config, request_id="two-nodes")
            steps, logs = [], []
            for event in client.watch(job.id, timeout=900):
                kind = event.WhichOneof("event")
                if kind == "metrics":
                    steps.append(event.metrics.step)
                    if len(steps) == 1:
                        (out / "first-step.json").write_text(json.dumps({"step": event.metrics.step}))
                elif kind == "log":
                    logs.append(event.log.text)
            final = client.get(job.id)
        result = {"state": int(final.state), "reason": final.reason, "steps": steps, "logs": logs, "run_dir": final.run_dir}
        (out / "result.json").write_text(json.dumps(result))
    finally:
        scheduler.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
