# The project's image for docker-compose: producer, leasekeeper and workers CLIs.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml setup.py compiled_modules.txt README.md ./
COPY producer producer
COPY leasekeeper leasekeeper
COPY workers workers
COPY schemas schemas
COPY jobcore jobcore
COPY examples examples
# gcc for the compiled hot path (setup.py), removed once the package is built.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install --no-cache-dir . \
    && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*
ENV PYTHONUNBUFFERED=1
