"""``model.release_memory`` (tinker_algos.model.allocator): with glibc's mmap threshold fixed, the
memory of freed large tensors goes back to the system; with glibc's moving threshold it stays
resident. Each case is a fresh process: the setting is process-wide."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tinker_algos.model import allocator

PROBE = textwrap.dedent(
    """
    import sys, torch
    from tinker_algos.model.allocator import release_freed_memory
    def rss_mib():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    took = release_freed_memory() if sys.argv[1] == "on" else None
    before = rss_mib()
    x = torch.ones(2 << 20); del x  # one 8 MiB block mapped and freed: glibc's threshold moves past 4 MiB
    blocks, small = [], []
    for _ in range(100):  # 400 MiB in 4 MiB blocks, each followed by a small live one
        blocks.append(torch.ones(1 << 20))
        small.append(torch.ones(4096))
    del blocks
    print(took, round(rss_mib() - before))
    """
)


def resident_after_free(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(allocator._libc() is None or not sys.platform.startswith("linux"), reason="glibc only")
def test_freed_tensors_leave_the_process_only_with_the_fixed_threshold() -> None:
    took, kept_on = resident_after_free("on")
    _, kept_off = resident_after_free("off")
    assert took == "True"
    assert kept_off > 300  # glibc's default: most of the 400 MiB stays resident after the tensors are freed
    assert kept_on < 50  # fixed threshold: it went back


def test_release_is_a_no_op_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_libc", lambda: None)
    assert allocator.release_freed_memory() is False
