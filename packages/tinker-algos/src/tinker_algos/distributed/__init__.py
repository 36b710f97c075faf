"""One job over many processes (``execution`` in the job config): rollout workers, data-parallel
learners, versioned weight sync that proves itself, bounded staleness.

* :mod:`~tinker_algos.distributed.runtime` -- what a run holds: Ray, the placement group, the actors;
* :mod:`~tinker_algos.distributed.cluster` -- joining or starting Ray, placement groups;
* :mod:`~tinker_algos.distributed.rollouts` -- the GRPO collector on rollout workers (publish, admit, take);
* :mod:`~tinker_algos.distributed.pool` -- the rollout worker actors of a run;
* :mod:`~tinker_algos.distributed.rollout_worker` -- the rollout worker actor;
* :mod:`~tinker_algos.distributed.learners` -- data-parallel learners (``DataParallelTrainer``);
* :mod:`~tinker_algos.distributed.weights` -- weight records, manifests, the durable directory;
* :mod:`~tinker_algos.distributed.staleness` -- admission control and the staleness check (no models);
* :mod:`~tinker_algos.distributed.replica` -- a copy of the job's policy in another process;
* :mod:`~tinker_algos.distributed.faults` -- faults injected on purpose (``OPENTINKER_FAULTS``).

Ray is needed only here, and imported only when a job's ``execution`` asks for actors.
"""
