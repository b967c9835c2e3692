# The lakelog server image (the ingest tier): `lakelog serve` on port 8080.
#
#   docker build -t lakelog .
#   docker run --rm -p 8080:8080 -e LAKELOG_API_KEYS_JSON='{"<key>": "me"}' \
#     lakelog --root s3://<bucket>/<prefix> serve --host 0.0.0.0 --port 8080
#
# The package is installed exactly as the README says, `pip install .`, into a
# virtual environment that the runtime stage copies. tests/infra checks these
# steps by running the same install commands in a fresh virtual environment.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/lakelog
ENV PATH="/opt/lakelog/bin:$PATH"

WORKDIR /src
RUN python -m venv "$VIRTUAL_ENV"
COPY pyproject.toml README.md ./
COPY lakelog ./lakelog
RUN pip install --no-cache-dir .

FROM ${PYTHON_IMAGE}

ENV VIRTUAL_ENV=/opt/lakelog \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
ENV PATH="/opt/lakelog/bin:$PATH"

# An unprivileged user with a fixed uid (the ECS task definition runs as it).
RUN groupadd --system --gid 10001 lakelog \
 && useradd --system --uid 10001 --gid lakelog --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin lakelog

COPY --from=build /opt/lakelog /opt/lakelog

USER 10001:10001
WORKDIR /tmp
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=3)"]

ENTRYPOINT ["lakelog"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
