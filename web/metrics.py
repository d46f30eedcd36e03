"""The web process's ``/metrics``: platform state computed at scrape time.

Frontier URLs by job and state (running and paused jobs), the due backlog (work that more
workers could start now: the scheduler keeps the broker short, so this is where a backlog
waits), broker messages (ready over every priority list, and unacked: in flight), checkpoint
age per running job, jobs by state, per-host adaptive throttle delays, open circuit
breakers and ladder levels (each read from its index, ``broker.indexed``: a walk over the
keyspace would cost a broad crawl's every key at each scrape), running and paused spider
jobs' ``crawler.stats`` (``METRICS_STATS_PER_JOB`` names each at most, kept in proportion to
what they took to read: ``STATS_READ_SHARE``), online workers by channel and version, and the
scheduler's leadership and passes.
Every web process computes the same values from the database and Redis, so gunicorn's
several processes need no shared registry: a query for the backlog takes ``max`` over pods.
Workers serve their own counters (``tasks/worker/metrics.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime

from django.core.cache import cache
from django.db.models import Count, Max
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from tasks import broker
from tasks.defaults import setting
from tasks.fetch import circuit, ladder, politeness
from tasks.fetch.politeness import decayed_delay
from tasks.frontier import channels, leadership
from tasks.frontier.stats import stats_of
from tasks.worker import registry
from web.models import ChannelEvent, CrawlJob, FrontierURL, JobState, Review, URLState


def _field_of_each(client, index: str, field: str) -> list[tuple[bytes, bytes | None]]:
    """(key, value of ``field``) for each hash that ``index`` names (up to a bound of hosts)."""
    keys = broker.indexed(index, setting("METRICS_THROTTLE_HOSTS_MAX"))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hget(key, field)
    return list(zip(keys, pipe.execute() if keys else [], strict=True))


def _job_host(key: bytes, suffix: str) -> tuple[str, str]:
    """(job, host[:port]) of a ``crawl:host:{job}:{host[:port]}{suffix}`` key."""
    job_id, host = key.decode()[len("crawl:host:") : -len(suffix)].split(":", 1)
    return job_id, host


def due_backlog() -> int:
    """URLs of running jobs that a free worker could start now, counted up to a bound per job.

    A job that paces its hosts (a delay or a per-host concurrency) can use about one worker
    slot per host at a time, so it counts its due hosts, not its due URLs.
    """
    now = timezone.now()
    total = 0
    for job in CrawlJob.objects.filter(state=JobState.RUNNING).only(
        "id", "delay", "host_concurrency"
    ):
        due = FrontierURL.objects.filter(job_id=job.pk, state=URLState.QUEUED, not_before__lte=now)
        if job.delay > 0 or job.host_concurrency:
            slots = job.host_concurrency or 1
            total += (
                slots * due.values("host").distinct()[: setting("METRICS_DUE_COUNT_MAX")].count()
            )
        else:
            total += due.values("id")[: setting("METRICS_DUE_COUNT_MAX")].count()
    return total


def _redis_now_ms(client) -> int:
    now_s, now_us = client.time()
    return now_s * 1000 + now_us // 1000


def throttled_hosts() -> list[tuple[str, str, float]]:
    """(job, host[:port], seconds) of every host told to slow down: its adaptive delay in
    force now (decayed since it was set), up to a bound of hosts."""
    client = broker.client()
    now_ms = _redis_now_ms(client)
    half_life = setting("THROTTLE_HALF_LIFE_S")
    keys = broker.indexed(politeness.THROTTLED, setting("METRICS_THROTTLE_HOSTS_MAX"))
    return [
        (*_job_host(key, ":delay"), decayed_delay(value, now_ms, half_life))
        for key, value in zip(keys, client.mget(keys) if keys else [], strict=True)
        if value is not None
    ]


def open_circuits() -> list[tuple[str, str]]:
    """(job, host[:port]) of every host whose circuit breaker is open now."""
    client = broker.client()
    now_ms = _redis_now_ms(client)
    return [
        _job_host(key, ":circuit")
        for key, until in _field_of_each(client, circuit.OPENED, "open_until")
        if until is not None and int(until) > now_ms
    ]


class PlatformCollector:
    def collect(self):
        live = [JobState.RUNNING, JobState.PAUSED]
        frontier = GaugeMetricFamily(
            "crawlplatform_frontier_urls",
            "Frontier URLs by job and state",
            labels=["crawl_job", "state"],
        )
        rows = (
            FrontierURL.objects.filter(job__state__in=live)
            .values_list("job_id", "state")
            .annotate(n=Count("id"))
        )
        for job_id, state, n in rows:
            frontier.add_metric([str(job_id), state], n)
        yield frontier

        yield GaugeMetricFamily(
            "crawlplatform_frontier_due_urls",
            "Due URLs of running jobs not yet released to the broker (hosts, for paced jobs)",
            value=due_backlog(),
        )

        jobs = GaugeMetricFamily("crawlplatform_jobs", "Jobs by state", labels=["state"])
        counts = dict(CrawlJob.objects.values_list("state").annotate(n=Count("id")))
        for state in JobState.values:
            jobs.add_metric([state], counts.get(state, 0))
        yield jobs

        age = GaugeMetricFamily(
            "crawlplatform_checkpoint_age_seconds",
            "Seconds since the last checkpoint of each running job",
            labels=["crawl_job"],
        )
        now = timezone.now()
        running = CrawlJob.objects.filter(state=JobState.RUNNING).annotate(
            last=Max("checkpoints__created_at")
        )
        for job in running:
            since = job.last or job.started_at or job.created_at
            age.add_metric([str(job.pk)], (now - since).total_seconds())
        yield age

        depth = broker.depth()
        messages = GaugeMetricFamily(
            "crawlplatform_broker_messages",
            "Crawl messages in the broker: ready (every priority list) and unacked (in flight)",
            labels=["state"],
        )
        for state, n in depth.items():
            if n is not None:  # RabbitMQ: unacked is on its own management API
                messages.add_metric([state], n)
        yield messages

        throttle = GaugeMetricFamily(
            "crawlplatform_host_throttle_delay_seconds",
            "Adaptive delay in force per job and host (hosts that were told to slow down)",
            labels=["crawl_job", "host"],
        )
        for job_id, host, seconds in throttled_hosts():
            throttle.add_metric([job_id, host], seconds)
        yield throttle

        circuits = GaugeMetricFamily(
            "crawlplatform_host_circuit_open",
            "Hosts whose circuit breaker is open (1): their URLs fail as host_unreachable",
            labels=["crawl_job", "host"],
        )
        for job_id, host in open_circuits():
            circuits.add_metric([job_id, host], 1)
        yield circuits

        ladders = GaugeMetricFamily(
            "crawlplatform_host_ladder_level",
            "Anti-bot ladder level per job and host (1 back off, 2 rotate, 3 render, 4 park)",
            labels=["crawl_job", "host"],
        )
        for key, level in _field_of_each(broker.client(), ladder.LADDERS, "level"):
            if level is not None and int(level) > 0:
                job_id, host = key.decode()[len("crawl:ladder:") :].split(":", 1)
                ladders.add_metric([job_id, host], int(level))
        yield ladders

        review = GaugeMetricFamily(
            "crawlplatform_review_queue",
            "URLs parked for human review, per job",
            labels=["crawl_job"],
        )
        parked = Review.objects.values_list("job_id").annotate(n=Count("id"))  # small table
        for job_id, n in parked:
            review.add_metric([str(job_id)], n)
        yield review
        yield from _spider_stats(live)
        yield from _channels()

        heartbeat = GaugeMetricFamily(
            "crawlplatform_worker_heartbeat_age_seconds",
            "Seconds since each worker's event loop last wrote its heartbeat",
            labels=["worker"],
        )
        last_task = GaugeMetricFamily(
            "crawlplatform_worker_last_task_age_seconds",
            "Seconds since each worker last finished a task (no task yet: since its start)",
            labels=["worker"],
        )
        now_s = time.time()
        for worker in registry.workers():
            heartbeat.add_metric([worker["name"]], now_s - worker["heartbeat"])
            last_task.add_metric(
                [worker["name"]], now_s - (worker["last_task"] or worker["heartbeat"])
            )
        yield heartbeat
        yield last_task
        yield from _fleet(now_s)


def _spider_stats(live: list[str]):
    """Each running or paused spider job's ``crawler.stats`` that are numbers (dates as Unix
    time), the first ``METRICS_STATS_PER_JOB`` by name: a spider may make stat names without
    end, and each is a time series; how many were left out is a gauge of its own."""
    values = GaugeMetricFamily(
        "crawlplatform_spider_stat",
        "A running or paused spider job's crawler.stats value by name (numbers; dates as Unix "
        "time): Scrapy's built-in stats and the spider's own, over every worker",
        labels=["crawl_job", "stat"],
    )
    omitted = GaugeMetricFamily(
        "crawlplatform_spider_stats_omitted",
        "Stat names of a running or paused spider job past METRICS_STATS_PER_JOB, not exported",
        labels=["crawl_job"],
    )
    cap = setting("METRICS_STATS_PER_JOB")
    spiders = CrawlJob.objects.filter(state__in=live).exclude(spider="").only(
        "id", "state", "started_at", "finished_at", "close_reason")  # fmt: skip
    for job in spiders:
        numbers = [(name, number) for name, value in _stats(job).items()
                   if (number := _number(value)) is not None]  # fmt: skip
        for name, number in numbers[:cap]:
            values.add_metric([str(job.pk), name], number)
        omitted.add_metric([str(job.pk)], max(0, len(numbers) - cap))
    yield values
    yield omitted


def _stats(job: CrawlJob) -> dict:
    """The job's stats, kept (Django's cache) in proportion to what they took to read
    (``STATS_READ_SHARE``): a read is a pass over the job's stat rows, items and URLs."""
    started = job.started_at.timestamp() if job.started_at else 0  # ids come back after a reset
    key = f"metrics:spider_stats:{job.pk}:{started:.6f}:{job.run}"
    found = cache.get(key)
    if found is None:
        began = time.monotonic()
        found = stats_of(job)
        cache.set(key, found, (time.monotonic() - began) / setting("STATS_READ_SHARE"))
    return found


def _number(value: object) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _fleet(now_s: float):
    """Online workers by channel and version; whether a scheduler leads; its passes so far."""
    fleet = GaugeMetricFamily(
        "crawlplatform_workers", "Online workers (fresh heartbeat) by channel and version",
        labels=["channel", "version"],
    )  # fmt: skip
    counts = Counter(
        (w["channel"], w["version"]) for w in registry.workers() if registry.online(w, now_s)
    )
    for (channel, version), n in sorted(counts.items()):
        fleet.add_metric([channel, version], n)
    yield fleet
    yield GaugeMetricFamily(
        "crawlplatform_scheduler_leader", "1 while a scheduler holds the leadership, else 0",
        value=int(leadership.leader() is not None),
    )  # fmt: skip
    yield CounterMetricFamily(
        "crawlplatform_scheduler_passes", "Passes the leading schedulers have made",
        value=leadership.passes(),
    )  # fmt: skip


def _channels():
    """Release channels: weights, ready messages per channel queue, last automatic rollback."""
    weight = GaugeMetricFamily(
        "crawlplatform_channel_weight", "Percent of hosts routed to each release channel",
        labels=["channel"],
    )  # fmt: skip
    split = channels.weights(cached=False)
    ready = GaugeMetricFamily(
        "crawlplatform_channel_ready_messages", "Crawl messages waiting in each channel's queue",
        labels=["channel", "queue"],
    )  # fmt: skip
    for queue in channels.queues():
        name = channels.of_queue(queue)
        weight.add_metric([name], split.get(name, 0))
        ready.add_metric([name, queue], broker.depth(queue)["ready"])
    yield weight
    yield ready
    rolled = GaugeMetricFamily(
        "crawlplatform_channel_rollback_timestamp_seconds",
        "When each channel was last rolled back (Unix time)", labels=["channel"],
    )  # fmt: skip
    last = ChannelEvent.objects.filter(kind="rolled_back").values("channel").annotate(at=Max("at"))
    for row in last:
        rolled.add_metric([row["channel"]], row["at"].timestamp())
    yield rolled


def render() -> bytes:
    """The platform metrics in Prometheus text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PlatformCollector())
    return generate_latest(registry)
