"""Peak memory per phase (tinker_algos.records.memory): real allocations, measured by the kernel's
high-water mark of the process's resident set, folded into every phase open at the time.

Each check runs in a fresh interpreter: the high-water mark is the whole process's, so in a test
worker that has run other tests (threads of earlier tests, an allocator holding freed memory) a
phase's peak could include what the check did not allocate."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tinker_algos.records.memory import PeakWatch

pytestmark = pytest.mark.skipif(not PeakWatch().rss, reason="needs Linux's VmHWM and a writable /proc/self/clear_refs")

PRELUDE = """
import numpy as np
from tinker_algos.records.memory import GIB, PeakWatch
from tinker_algos.records.recording import Recorder, phase
from tinker_core.config import RolloutsLogConfig

MIB = 1 << 20

def touch(mib):
    return np.ones(mib * MIB, dtype=np.uint8)  # mib MiB really resident (every page written)
"""


def run_fresh(body: str) -> None:
    """Run ``body`` (after :data:`PRELUDE`) in a fresh interpreter; its assertions fail the test."""
    code = PRELUDE + textwrap.dedent(body)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_a_phase_peak_sees_an_allocation_freed_before_it_ends_and_its_sibling_does_not() -> None:
    run_fresh("""
        w = PeakWatch()
        outer = w.begin()
        inner = w.begin()
        block = touch(256)
        del block  # freed before the phase ends: only the high-water mark remembers it
        inner_peak = w.end(inner).bytes["rss"]
        sibling = w.begin()
        sibling_peak = w.end(sibling).bytes["rss"]
        outer_peak = w.end(outer).bytes["rss"]
        assert inner_peak - sibling_peak >= 200 * MIB, (inner_peak, sibling_peak)  # the sibling starts after the free
        assert outer_peak >= inner_peak  # the outer phase covers the inner one
    """)


def test_the_recorder_reports_each_phase_and_the_step_under_memory() -> None:
    run_fresh("""
        rec = Recorder(None, RolloutsLogConfig(per_step=0), None)
        with rec.active("s", 1):
            with phase("big"):
                block = touch(192)
                del block
            with phase("small"):
                pass
            metrics = rec.memory_metrics()
        assert set(metrics) == {"memory/big_rss_gib", "memory/small_rss_gib", "memory/step_rss_gib"}, metrics
        assert metrics["memory/big_rss_gib"] - metrics["memory/small_rss_gib"] >= 150 * MIB / GIB, metrics
        assert metrics["memory/step_rss_gib"] >= metrics["memory/big_rss_gib"], metrics
        with phase("outside"):  # no active recorder: nothing measured, nothing kept
            pass
        assert "outside" not in rec.memory
    """)
