# syntax=docker/dockerfile:1
# OpenTinker, CPU image: the scheduler (`opentinker scheduler start`) and, with the same image,
# the Ray head and worker nodes it places jobs on (Ray's versions must match on every node).
#
#   docker build -t opentinker:0.1.0 .
#   docker run --rm -p 50051:50051 -p 9464:9464 -v opentinker-data:/data opentinker:0.1.0
#
# Everything is installed from uv.lock (`uv sync --locked`): the image holds the versions CI tested.
# The CUDA variant is Dockerfile.cuda; docs/guides/kubernetes.md runs both on KubeRay.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# uv from PyPI, pinned (the version that wrote uv.lock)
RUN pip install --no-cache-dir uv==0.13.9
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PROJECT_ENVIRONMENT=/opt/opentinker
WORKDIR /src
COPY pyproject.toml uv.lock LICENSE README.md ./
COPY packages ./packages
# every workspace package (scheduler, algorithms, environments, client, serving), no dev tools,
# installed as wheels (not editable) so /src can be left behind
RUN uv sync --locked --no-dev --all-packages --no-editable

FROM ${PYTHON_IMAGE}
# KubeRay's probes run wget in the Ray containers; tini reaps Ray's child processes. KubeRay
# starts Ray in a login shell (bash -l), whose /etc/profile resets PATH: profile.d puts ours back.
# hadolint ignore=DL3008,SC2016
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --user-group --create-home --home-dir /home/opentinker opentinker \
    && mkdir -p /data \
    && chown opentinker:opentinker /data \
    && echo 'export PATH=/opt/opentinker/bin:$PATH' > /etc/profile.d/opentinker.sh
COPY --from=build /opt/opentinker /opt/opentinker
ENV PATH=/opt/opentinker/bin:$PATH \
    OPENTINKER_HOME=/data \
    RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 \
    PYTHONUNBUFFERED=1
USER 1000:1000
WORKDIR /home/opentinker
VOLUME ["/data"]
# gRPC (JobService, TrainingService, health) and the Prometheus endpoint
EXPOSE 50051 9464
ENTRYPOINT ["/usr/bin/tini", "--", "opentinker"]
CMD ["scheduler", "start", "--host", "0.0.0.0", "--port", "50051", "--metrics-port", "9464"]
