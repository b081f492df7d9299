# msop operator image. Two stages: build the wheel with pip's build tooling, then install it
# into a venv in a fresh slim image that has no compiler, no pip cache and no source tree.
#   docker build -t msop:latest .
# Without an index (air-gapped): mount or copy a wheelhouse of the dependencies and pass
#   --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/path/to/wheelhouse
# (the real-node tests build it this way with buildah, see testbed/images.py in the checkout).
# The same build and install steps run without Docker in tests/e2e/kwok/test_dockerfile.py,
# which also checks that the installed wheel holds the package msop and no test harness.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_INDEX_URL
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md ./
COPY msop ./msop
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ARG PIP_INDEX_URL
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/msop/bin:$PATH
COPY --from=build /wheels /wheels
# The venv is owned by root and read-only to the operator; pip and setuptools leave with
# the wheels, so the final image has no build tools in it.
RUN python -m venv /opt/msop \
    && /opt/msop/bin/pip install /wheels/*.whl \
    && /opt/msop/bin/python -m compileall -q /opt/msop/lib \
    && /opt/msop/bin/pip uninstall -y pip setuptools \
    && rm -rf /wheels
# 65532 is the conventional "nonroot" UID of distroless images; the Deployment runs as it.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["msop"]
CMD ["run"]
