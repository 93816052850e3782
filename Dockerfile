# The worker's image. BASE_IMAGE is any Debian-like image with Python 3.11+ and its venv
# module: python:3.11-slim from a registry, or one built from Debian's packages where no
# registry is reachable (CI: debootstrap with python3,python3-venv, then `docker import`).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
# More pip arguments: "--no-index --find-links /app/wheels" installs only wheelhouse/.
ARG PIP_INSTALL_ARGS=""

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

WORKDIR /app

COPY pyproject.toml README.md constraints.txt ./
COPY wheelhouse/ ./wheels/
COPY workflows/ ./workflows/
COPY activities/ ./activities/
COPY agentledger/ ./agentledger/
COPY worker.py starter.py ./

# The lean install with the otel extra (AGENTLEDGER_OTEL=1 exports traces over OTLP;
# docker-compose.yml turns it on): what a production worker needs, no dev server and no
# embedded Postgres (those are the `local` extra), every version pinned by constraints.txt.
RUN python3 -m venv /opt/venv \
    && pip install --no-cache-dir $PIP_INSTALL_ARGS -c constraints.txt ".[otel]" \
    && rm -rf wheels \
    && useradd --create-home --uid 10001 agentledger \
    && chown -R agentledger:agentledger /app

USER agentledger

# Exec form so python is PID 1 and receives SIGTERM directly (graceful worker drain).
# A worker with no tools refuses to start: set AGENTLEDGER_TOOLS (docker-compose.yml does).
CMD ["python", "worker.py"]
