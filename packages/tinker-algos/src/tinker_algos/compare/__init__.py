"""``opentinker compare``: one base job, variants of it, several seeds; run them all, then report
each metric with a t interval over seeds and each variant's difference from a baseline.

* :mod:`~tinker_algos.compare.spec`: the compare file, checked before any job starts, and its jobs;
* :mod:`~tinker_algos.compare.runner`: the jobs run embedded, one after another, resumable;
* :mod:`~tinker_algos.compare.scheduler`: the jobs run on a scheduler, in parallel, resumable;
* :mod:`~tinker_algos.compare.stats`: the math (t intervals, paired and Welch differences, IQM, probability of improvement, curve area, steps to a gain);
* :mod:`~tinker_algos.compare.summary`: metrics rows -> each job's and each variant's numbers;
* :mod:`~tinker_algos.compare.report`: ``report.json``, ``report.md``, ``curves.png``.

None of them imports torch at import time (only running an embedded job loads it).
"""
