# One image for every role: web (gunicorn), worker (celery), scheduler, flower, migrate.
# `docker build .` builds it; `docker build --target render .` builds the render workers'
# image: the same one plus Debian's chromium and Playwright (requirements-render.txt).
FROM python:3.11-slim AS build
WORKDIR /build
COPY requirements.txt requirements-render.txt ./
RUN pip wheel --no-cache-dir --wheel-dir /wheels -r requirements.txt \
    && pip wheel --no-cache-dir --wheel-dir /wheels-render -r requirements-render.txt

FROM python:3.11-slim AS base
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin crawl
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/* && rm -rf /wheels
WORKDIR /app
ENV PYTHONUNBUFFERED=1 CRAWL_DATA_DIR=/tmp/crawl
# tini is PID 1: it forwards SIGTERM to the process, so Celery gets its warm shutdown.
ENTRYPOINT ["tini", "--"]

# Render workers: headless Chromium from Debian (Playwright's own browser builds are not
# downloaded), driven by Playwright; they consume the render queue only.
FROM base AS render
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium fonts-liberation \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels-render /wheels-render
RUN pip install --no-cache-dir --no-deps /wheels-render/* && rm -rf /wheels-render
COPY --chown=10001:10001 . .
# Bytecode compiled once in the image, not by every container at every start.
RUN python -m compileall -q crawlplatform tasks web
USER 10001
ENV CRAWL_CHROMIUM_PATH=/usr/bin/chromium
CMD ["celery", "-A", "crawlplatform", "worker", "--pool", "prefork", "--concurrency", "2", \
     "--queues", "render", "--without-gossip", "--without-mingle", "--loglevel", "INFO"]

FROM base AS app
COPY --chown=10001:10001 . .
RUN python -m compileall -q crawlplatform tasks web
USER 10001
EXPOSE 8000
CMD ["gunicorn", "-c", "crawlplatform/gunicorn_config.py", "crawlplatform.wsgi"]
