# The project's image for docker-compose: producer, leasekeeper and workers CLIs.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY producer producer
COPY leasekeeper leasekeeper
COPY workers workers
COPY schemas schemas
COPY jobcore jobcore
COPY examples examples
RUN pip install --no-cache-dir .
ENV PYTHONUNBUFFERED=1
