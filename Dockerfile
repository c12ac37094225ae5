# syntax=docker/dockerfile:1
# One image for every subcommand: `hairpin-proxy proxy` (the default), `controller`, `cleanup`,
# `etchosts`, `doctor` and `render`.
#
# Multi-arch build (see docs/install.md):
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/hairpin-proxy/hairpin-proxy:0.1.0 --push .

ARG PYTHON_VERSION=3.12

# ---------------------------------------------------------------- builder: wheels only
FROM python:${PYTHON_VERSION}-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src/ src/
# Our wheel and the wheels of its dependencies (with the uvloop extra), so the runtime stage
# installs offline from /wheels (--no-index) and never needs a compiler.
RUN pip wheel --wheel-dir /wheels ".[fast]"

# ---------------------------------------------------------------- runtime
FROM python:${PYTHON_VERSION}-slim AS runtime
LABEL org.opencontainers.image.title="hairpin-proxy" \
      org.opencontainers.image.description="Make in-cluster requests to the cluster's own PROXY-protocol ingress work" \
      org.opencontainers.image.source="https://github.com/hairpin-proxy/hairpin-proxy" \
      org.opencontainers.image.licenses="MIT"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# The wheels are bind-mounted, not copied, so they never land in a layer; pip itself is removed
# afterwards: nothing in the running container installs packages.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels "hairpin-proxy[fast]" \
 && pip uninstall --yes pip \
 && hairpin-proxy --version
# A numeric, non-root user: Kubernetes can verify runAsNonRoot without a passwd entry.
USER 65532:65532
EXPOSE 8080 8443 9090
ENTRYPOINT ["hairpin-proxy"]
CMD ["proxy"]
