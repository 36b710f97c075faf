"""How much memory this host uses and may use: the container's cgroup limit where there is one
(a Kubernetes pod's ``limits.memory``), else the machine's.

Read by the job worker with every metrics report (so the scheduler sees each Ray node a job runs
on) and by the scheduler for its own host at scrape time. Standard library only: the job worker
imports it.
"""

from __future__ import annotations

import socket
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _stat(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _meminfo(path: Path) -> dict[str, int]:
    out = {}
    try:
        for line in path.read_text().splitlines():
            name, _, rest = line.partition(":")
            out[name] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return out


def read(cgroup: Path = CGROUP, meminfo: Path = MEMINFO) -> tuple[int, int] | None:
    """``(used_bytes, limit_bytes)``, or None when neither a cgroup nor /proc/meminfo says.

    Used is the working set (usage less inactive page cache, what the kernel cannot simply drop,
    as the kubelet counts it); the limit is the cgroup's when it is set and below the machine's
    memory.
    """
    info = _meminfo(meminfo)
    total = info.get("MemTotal")
    for limit_file, usage_file, stat_file, inactive in (
        (cgroup / "memory.max", cgroup / "memory.current", cgroup / "memory.stat", "inactive_file"),  # v2
        (cgroup / "memory" / "memory.limit_in_bytes", cgroup / "memory" / "memory.usage_in_bytes",
         cgroup / "memory" / "memory.stat", "total_inactive_file"),  # v1
    ):
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and (total is None or limit < total):
            return max(usage - _stat(stat_file, inactive), 0), limit
    if total and "MemAvailable" in info:
        return total - info["MemAvailable"], total
    return None


def report() -> dict[str, object] | None:
    """``{"name": hostname, "used": bytes, "limit": bytes}`` for a metrics report, or None."""
    found = read()
    if found is None:
        return None
    return {"name": socket.gethostname(), "used": found[0], "limit": found[1]}
