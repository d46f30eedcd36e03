"""What a broad crawl's Redis keyspace costs the readers that are not the crawl's own.

    .venv/bin/python benchmarks/keyspace.py [--hosts 100000] [--scrapes 20] [--reads-for 10]

A PostgreSQL cluster and a redis-server of the run's own (``common.private_servers``); Redis
gets the keys a broad crawl keeps for ``--hosts`` hosts (six a host, as ``scale.py`` measured:
slot, in-flight, health, robots.txt, ...), none of them throttled, cut off or on the ladder.
Printed:

1. ``/metrics``: ``--scrapes`` runs of the web's collector one second apart, with one worker
   registered: each scrape's wall time, and Redis's CPU over them all.
2. The worker registry with every worker gone: ``registry.workers()`` at the scheduler's pace
   while no worker is registered (``NO_SLOTS_CACHE_S``, 0.25 s) for ``--reads-for`` seconds:
   the reads done and Redis's CPU.
"""

from __future__ import annotations

import argparse
import os

import redis
from common import ROOT, django_shell, fresh_database, machine_speed, migrate, private_servers

MEASURE = """
import statistics, time
import redis
from django.conf import settings
from tasks.worker import registry
from web.metrics import PlatformCollector

r = redis.Redis.from_url(settings.REDIS_URL)
def cpu():
    info = r.info("cpu")
    return info["used_cpu_sys"] + info["used_cpu_user"]

fields = {"version": "1", "channel": "main", "queues": "crawl", "slots": 8, "pid": 1,
          "spiders": "", "started": time.time(), "heartbeat": time.time(), "last_task": 0}
registry.write("bench@host", fields, 600)
walls, before = [], cpu()
for _ in range(SCRAPES):
    began = time.monotonic()
    list(PlatformCollector().collect())
    walls.append(time.monotonic() - began)
    time.sleep(max(0.0, 1 - walls[-1]))
print(f"/metrics: {SCRAPES} scrapes, wall median {statistics.median(walls) * 1000:.1f} ms, "
      f"max {max(walls) * 1000:.1f} ms; Redis CPU {cpu() - before:.2f} s")
registry.remove("bench@host")
reads, before, began = 0, cpu(), time.monotonic()
while time.monotonic() - began < READS_FOR:
    registry.workers()
    reads += 1
    time.sleep(0.25)
print(f"registry, no worker: {reads} reads in {READS_FOR} s; Redis CPU {cpu() - before:.2f} s")
"""


def fill(url: str, hosts: int) -> None:
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for n in range(hosts):
        base = f"crawl:host:1:h{n}.test"
        for part in ("next", "inflight", "health", "floor", "robots", "answered"):
            pipe.set(f"{base}:{part}", 1)
        if n % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    print(f"{client.dbsize():,} keys in Redis")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--reads-for", type=int, default=10)
    args = parser.parse_args()
    print(machine_speed())
    print(f"tree: {ROOT}")
    with private_servers() as (postgres, redis_url):
        env = {**os.environ, "DATABASE_URL": fresh_database(postgres, "crawlbench_keyspace"),
               "REDIS_URL": redis_url, "LOG_LEVEL": "WARNING"}  # fmt: skip
        migrate(env)
        fill(redis_url, args.hosts)
        code = MEASURE.replace("SCRAPES", str(args.scrapes))
        print(django_shell(env, code.replace("READS_FOR", str(args.reads_for))))


if __name__ == "__main__":
    main()
