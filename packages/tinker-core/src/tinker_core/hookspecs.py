"""The hooks a plugin implements. Every hook takes a ``register`` callback (or the CLI app).

A plugin is a module (or object) exposed through an entry point in the group ``opentinker``
whose functions are marked with :data:`tinker_core.hookimpl`::

    # pyproject.toml
    [project.entry-points.opentinker]
    myenvs = "my_package.plugin"

    # my_package/plugin.py
    from tinker_core import EnvSpec, hookimpl

    @hookimpl
    def opentinker_register_envs(register):
        register(EnvSpec(id="mine/task-v0", description="..."), MyEnv)

Keep plugin modules light: import heavy libraries inside the factories, not at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    import typer

    from tinker_core.contracts import AdvantageEstimator, Loss, LossKind, OptimizerFactory
    from tinker_core.env import EnvSpec

PROJECT_NAME = "opentinker"
ENTRY_POINT_GROUP = "opentinker"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

# The ``register`` callbacks the hooks receive: type a hook's argument with them. What is
# registered is typed by the contracts (AdvantageEstimator, Loss, OptimizerFactory, LossKind of
# tinker_core.contracts); tinker_core.plugin_entries implements each callback.


class EnvRegister(Protocol):
    """``register(spec, factory)`` of :func:`opentinker_register_envs`."""

    def __call__(self, spec: EnvSpec, factory: Callable[..., Any]) -> None: ...


class EstimatorRegister(Protocol):
    """``register(name, estimator, *, needs_critic=False, description=None)`` of
    :func:`opentinker_register_advantage_estimators`."""

    def __call__(
        self, name: str, estimator: AdvantageEstimator, *, needs_critic: bool = False, description: str | None = None
    ) -> None: ...


class OptimizerRegister(Protocol):
    """``register(name, factory, *, description=None)`` of :func:`opentinker_register_optimizers`."""

    def __call__(self, name: str, factory: OptimizerFactory, *, description: str | None = None) -> None: ...


class LossRegister(Protocol):
    """``register(name, loss_fn, *, kind="policy", description=None, vanishes_at_zero_advantage=False)``
    of :func:`opentinker_register_losses`."""

    def __call__(
        self, name: str, loss_fn: Loss, *, kind: LossKind = "policy", description: str | None = None,
        vanishes_at_zero_advantage: bool = False,
    ) -> None: ...


@hookspec
def opentinker_register_envs(register: EnvRegister) -> None:
    """Register text environments.

    :param register: ``register(spec: EnvSpec, factory)``. ``spec.id`` is the env id
        (``namespace/name-vN``); ``factory(**kwargs)`` builds a fresh :class:`TextEnv` or
        :class:`MultiAgentTextEnv` (a class works). ``tinker_core.make_env(spec.id, **kwargs)``
        calls it.
    """


@hookspec
def opentinker_register_advantage_estimators(register: EstimatorRegister) -> None:
    """Register advantage estimators.

    :param register: ``register(name, estimator, *, needs_critic=False, description=None)``.
        ``estimator(inputs: AdvantageInputs, **config) -> AdvantageOutputs`` is a pure function
        over numpy arrays (see :mod:`tinker_core.contracts`); ``needs_critic`` says whether it reads
        ``inputs.values_B_T``.
    """


@hookspec
def opentinker_register_optimizers(register: OptimizerRegister) -> None:
    """Register optimizers.

    :param register: ``register(name, factory, *, description=None)``.
        ``factory(params, **config)`` returns a ``torch.optim.Optimizer`` over ``params``
        (an iterable of tensors or parameter groups); ``config`` carries ``lr``,
        ``weight_decay`` and the optimizer's own keys.
    """


@hookspec
def opentinker_register_losses(register: LossRegister) -> None:
    """Register losses (policy, preference, value, KL or supervised).

    :param register: ``register(name, loss_fn, *, kind="policy", description=None,
        vanishes_at_zero_advantage=False)``. ``loss_fn(inputs: LossInputs, **config) ->
        LossOutputs`` computes a per-token loss ``loss_B_T`` (torch, differentiable in
        ``inputs.logprobs_B_T``) that the trainer aggregates with the job's aggregation mode.
        ``kind`` is one of ``policy``, ``preference``, ``value``, ``kl``, ``supervised``.
        ``vanishes_at_zero_advantage=True`` (policy losses only) promises that the loss and its
        gradient are exactly 0 on every token whose advantage is 0, whatever the logprobs; GRPO
        then skips the gradient pass of rows whose advantage is 0 everywhere
        (:func:`tinker_algos.algorithms.update.policy_update`).
    """


class RolloutProxyRegister(Protocol):
    """``register(name, start, *, description=None)`` of :func:`opentinker_register_rollout_proxies`."""

    def __call__(self, name: str, start: Callable[..., Any], *, description: str | None = None) -> None: ...


@hookspec
def opentinker_register_rollout_proxies(register: RolloutProxyRegister) -> None:
    """Register rollout proxies: servers that put a job's policy behind an HTTP API (the OpenAI
    one) and record, per call, the tokens it sampled, so an agent program can be a job's policy.

    :param register: ``register(name, start, *, description=None)``. ``start(policy, renderer,
        params, *, adapter=None, max_context_tokens=None)`` starts the proxy (a context manager
        whose value has ``base_url``, ``open_episode(episode_id, *, demonstrate=None)`` and
        ``close_episode(episode_id) -> list[ProxyCall]``; see :mod:`tinker_algos.rollout.agent_calls`).
        ``demonstrate``, when given, is a function of a chat call's messages returning the reply
        to answer with instead of a sample (an SFT warm start on the agent's own calls).
        ``agent/program-v0`` jobs use the one named ``openai`` (tinker-serve's).
    """


class RolloutEngineRegister(Protocol):
    """``register(name, factory, *, description=None)`` of :func:`opentinker_register_rollout_engines`."""

    def __call__(self, name: str, factory: Callable[..., Any], *, description: str | None = None) -> None: ...


@hookspec
def opentinker_register_rollout_engines(register: RolloutEngineRegister) -> None:
    """Register rollout engines: what samples a job's episodes (``rollout.engine`` names one).

    :param register: ``register(name, factory, *, description=None)``. ``factory(context:
        EngineContext) -> RolloutEngine`` builds the engine of a job stage (see
        :mod:`tinker_core.engines`: token-in/token-out generation with logprobs and stop
        reasons, weight updates in four phases, pause/resume, health); it may raise
        :class:`~tinker_core.engines.EngineUnavailableError` with one line saying what to start
        or install. Test an engine with :func:`tinker_core.testing.check_rollout_engine`.
        tinker-algos registers ``hf`` (the in-process sampler), tinker-engine-vllm ``vllm``.
    """


class HttpFrontRegister(Protocol):
    """``register(name, factory, *, description=None)`` of :func:`opentinker_register_http_fronts`."""

    def __call__(self, name: str, factory: Callable[..., Any], *, description: str | None = None) -> None: ...


@hookspec
def opentinker_register_http_fronts(register: HttpFrontRegister) -> None:
    """Register HTTP fronts: ASGI app factories the scheduler mounts on its ``--serve-port``
    route, found by name at run time so that it imports none of the packages that provide them.

    :param register: ``register(name, factory, *, description=None)``. The scheduler mounts
        ``openai`` (tinker-serve's: ``factory(models: ModelDirectory, *, header_timeout_s,
        body_timeout_s, device=None, max_batch=32)`` returns the OpenAI API's app over the models a
        :class:`~tinker_core.http_fronts.ModelDirectory` names) and ``viewer`` (tinker-client's:
        ``factory(runs)`` returns ``opentinker view``'s app over ``(run directory, name)``
        pairs); see :mod:`tinker_core.http_fronts`. Import the web framework inside the
        factory; an :class:`ImportError` there is answered as a missing front (HTTP 501).
    """


class JobClientRegister(Protocol):
    """``register(name, factory, *, description=None)`` of :func:`opentinker_register_job_clients`."""

    def __call__(self, name: str, factory: Callable[..., Any], *, description: str | None = None) -> None: ...


@hookspec
def opentinker_register_job_clients(register: JobClientRegister) -> None:
    """Register clients of a scheduler's JobService, for the commands of packages that may not
    import the client SDK (``opentinker compare --scheduler`` in tinker-algos).

    :param register: ``register(name, factory, *, description=None)``. ``factory(address,
        api_key, *, tls_ca=None)`` returns a connected
        :class:`~tinker_core.proto.job_service.JobServiceClient` (a context manager with
        ``address``, ``submit(config_text, *, request_id=None)``, ``get(job_id)``,
        ``watch(job_id)``: the job's events to its end, reconnecting as needed, and
        ``close()``); jobs and events are :mod:`tinker_core.proto.jobs_pb2` messages, errors
        ``grpc.RpcError``. tinker-client registers ``grpc`` (:class:`tinker_client.jobs.JobClient`).
    """


class DoctorCheckRegister(Protocol):
    """``register(name, check, *, description=None)`` of :func:`opentinker_register_doctor_checks`."""

    def __call__(self, name: str, check: Callable[[], Any], *, description: str | None = None) -> None: ...


@hookspec
def opentinker_register_doctor_checks(register: DoctorCheckRegister) -> None:
    """Register checks that ``opentinker doctor`` runs (what a plugin needs of this machine).

    :param register: ``register(name, check, *, description=None)``. ``check()`` takes no
        argument and returns an iterable of :class:`tinker_core.doctor.Finding` (one line each;
        a warning or an error names its fix). It runs in the doctor's process: import heavy
        libraries inside it, and let it not raise (an exception is reported as the plugin's
        error). tinker-algos registers ``torch`` (device and dtypes) and ``model-cache``.
    """


@hookspec
def opentinker_register_commands(cli: typer.Typer) -> None:
    """Add subcommands to the ``opentinker`` command line.

    :param cli: the root :class:`typer.Typer` application; add commands with
        ``@cli.command()`` or sub-applications with ``cli.add_typer(app, name=...)``.
    """


HOOK_NAMES: tuple[str, ...] = (
    "opentinker_register_envs",
    "opentinker_register_advantage_estimators",
    "opentinker_register_optimizers",
    "opentinker_register_losses",
    "opentinker_register_rollout_proxies",
    "opentinker_register_rollout_engines",
    "opentinker_register_http_fronts",
    "opentinker_register_job_clients",
    "opentinker_register_doctor_checks",
    "opentinker_register_commands",
)
