FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY pyproject.toml README.md constraints.txt ./
COPY workflows/ ./workflows/
COPY activities/ ./activities/
COPY agentrun/ ./agentrun/
COPY worker.py starter.py ./

# The lean install with the otel extra (AGENTRUN_OTEL=1 exports traces over OTLP;
# docker-compose.yml turns it on): what a production worker needs, no dev server and no
# embedded Postgres (those are the `local` extra), every version pinned by constraints.txt.
RUN pip install --no-cache-dir -c constraints.txt ".[otel]" \
    && useradd --create-home --uid 10001 agentrun \
    && chown -R agentrun:agentrun /app

USER agentrun

# Exec form so python is PID 1 and receives SIGTERM directly (graceful worker drain).
# A worker with no tools refuses to start: set AGENTRUN_TOOLS (docker-compose.yml does).
CMD ["python", "worker.py"]
