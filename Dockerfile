# The gpumix operator image: `gpumix run` as a non-root user on a slim Python base.
#   docker build -t REGISTRY/gpumix:0.1.0 .
# The pod runs it with a read-only root filesystem and an emptyDir at /tmp (the solvers' files).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# Only what the package build needs (see .dockerignore); constraints.txt pins every version,
# the build backend's too (PIP_CONSTRAINT reaches pip's isolated build environment).
COPY pyproject.toml README.md constraints.txt ./
COPY operator/ operator/
RUN python -m venv /opt/gpumix \
 && PIP_CONSTRAINT=/src/constraints.txt /opt/gpumix/bin/pip install --no-cache-dir /src

FROM python:3.11-slim-bookworm
# uid/gid 65532 as in the manifests' and chart's securityContext (runAsUser, runAsGroup).
RUN groupadd --system --gid 65532 gpumix \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /tmp gpumix
COPY --from=build /opt/gpumix /opt/gpumix
# MALLOC_ARENA_MAX: the planner's passes run on asyncio's worker threads, and glibc gives each
# thread its own malloc arena, each keeping its own high-water mark (bench/README.md, scale.py).
ENV PATH=/opt/gpumix/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TMPDIR=/tmp \
    HOME=/tmp \
    MALLOC_ARENA_MAX=2
USER 65532:65532
WORKDIR /tmp
# Prometheus metrics, kopf liveness (GET /healthz).
EXPOSE 8080 8081
ENTRYPOINT ["gpumix", "run"]
