# One image for every role: web (gunicorn), worker (celery), scheduler, flower, migrate.
FROM python:3.11-slim AS build
WORKDIR /build
COPY requirements.txt .
RUN pip wheel --no-cache-dir --wheel-dir /wheels -r requirements.txt

FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin crawl
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/* && rm -rf /wheels
WORKDIR /app
COPY --chown=10001:10001 . .
USER 10001
ENV PYTHONUNBUFFERED=1 CRAWL_DATA_DIR=/tmp/crawl
EXPOSE 8000
# tini is PID 1: it forwards SIGTERM to the process, so Celery gets its warm shutdown.
ENTRYPOINT ["tini", "--"]
CMD ["gunicorn", "-c", "crawlplatform/gunicorn_config.py", "crawlplatform.wsgi"]
