FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY pyproject.toml README.md ./
COPY workflows/ ./workflows/
COPY activities/ ./activities/
COPY agentrun/ ./agentrun/
COPY worker.py starter.py ./

# The otel extra: AGENTRUN_OTEL=1 exports traces over OTLP (docker-compose.yml turns it on).
RUN pip install --no-cache-dir ".[otel]" \
    && useradd --create-home --uid 10001 agentrun \
    && chown -R agentrun:agentrun /app

USER agentrun

# Exec form so python is PID 1 and receives SIGTERM directly (graceful worker drain).
CMD ["python", "worker.py"]
