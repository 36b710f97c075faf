"""The gateway's routes, one FastAPI router per area; :func:`.app.create_app` includes them all.

- :mod:`.service`: health, client config, capabilities, telemetry and Tinker sessions
  (``create_session``, ``session_heartbeat``, ``sessions/{id}/finish``);
- :mod:`.models`: ``create_model``, ``get_info``, ``unload_model``;
- :mod:`.training`: ``forward_backward``, ``optim_step``, ``save_weights[_for_sampler|_external]``, ``load_weights``;
- :mod:`.sampling`: ``create_sampling_session``, ``asample``, ``samplers/{id}``, ``weights_info``;
- :mod:`.rest`: the REST listings of training runs, checkpoints and sessions, checkpoint TTLs and
  signed download URLs (the SDK's ``RestClient``);
- :mod:`.downloads`: the files behind those signed URLs (no key: the signature is the credential);
- :mod:`.futures`: ``retrieve_future``.

Each route reads the gateway's shared state, a :class:`~.context.Context`, from the app.
"""

from __future__ import annotations

from fastapi import APIRouter

from tinker_scheduler.tinker_api.routes import (
                                  downloads,
                                  futures,
                                  models,
                                  rest,
                                  sampling,
                                  service,
                                  training,
)

#: Every router of the gateway, in the order they are included.
ROUTERS: tuple[APIRouter, ...] = (service.router, models.router, training.router, sampling.router, rest.router,
                                  downloads.router, futures.router)

__all__ = ["ROUTERS"]
