# syntax=docker/dockerfile:1
# One image for every subcommand: `hairpin-proxy proxy` (the default), `controller`, `cleanup`,
# `etchosts`, `doctor` and `render`.
#
# Multi-arch build (see docs/install.md; VERSION must be pyproject.toml's version):
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     -t ghcr.io/hairpin-proxy/hairpin-proxy:<version> --push .

ARG PYTHON_VERSION=3.12
# The image's version label. The build fails unless it equals the `version` in pyproject.toml
# (the one version source); tests/test_release.py keeps this default equal to it.
ARG VERSION=0.2.0

# ---------------------------------------------------------------- builder: wheels only
FROM python:${PYTHON_VERSION}-slim AS builder
ARG VERSION
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY src/ src/
RUN project_version="$(python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')" \
 && if [ "$VERSION" != "$project_version" ]; then \
        echo "VERSION=$VERSION but pyproject.toml says $project_version" >&2; exit 1; \
    fi
# The dependencies exactly as locked (every file checked against the lock's hashes, binary wheels
# only, so the runtime stage never needs a compiler), then our own wheel without dependencies.
RUN pip wheel --require-hashes --only-binary=:all: --no-deps --wheel-dir /wheels -r requirements.lock \
 && pip wheel --no-deps --wheel-dir /wheels .

# ---------------------------------------------------------------- runtime
FROM python:${PYTHON_VERSION}-slim AS runtime
ARG VERSION
LABEL org.opencontainers.image.title="hairpin-proxy" \
      org.opencontainers.image.description="Make in-cluster requests to the cluster's own PROXY-protocol ingress work" \
      org.opencontainers.image.source="https://github.com/hairpin-proxy/hairpin-proxy" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# PYTHONOPTIMIZE=2 leaves docstrings and asserts out of every module loaded: about 2.5 MiB less
# resident in the controller (docs/benchmarks-controller.md); nothing here reads a docstring or
# relies on an assert. Its bytecode is compiled below, once, for the read-only filesystem.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PYTHONOPTIMIZE=2 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# The wheels and the lock are bind-mounted, not copied, so they never land in a layer. The
# dependencies install offline from the lock with their hashes checked again, our wheel with
# --no-deps on top; pip check proves the set complete. pip itself is removed afterwards:
# nothing in the running container installs packages.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,from=builder,source=/src/requirements.lock,target=/tmp/requirements.lock \
    pip install --no-cache-dir --no-index --find-links=/wheels --require-hashes \
        --only-binary=:all: -r /tmp/requirements.lock \
 && pip install --no-cache-dir --no-index --find-links=/wheels --no-deps "hairpin-proxy==${VERSION}" \
 && pip check \
 && pip uninstall --yes pip \
 && python -m compileall -q -j 0 -o 2 \
        -x '/(test|tests|idle_test|idlelib|tkinter|turtledemo|ensurepip|lib2to3)/' \
        "$(python -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" \
 && test "$(hairpin-proxy --version)" = "hairpin-proxy ${VERSION}"
# A numeric, non-root user: Kubernetes can verify runAsNonRoot without a passwd entry.
USER 65532:65532
EXPOSE 80 443 9090
ENTRYPOINT ["hairpin-proxy"]
CMD ["proxy"]
