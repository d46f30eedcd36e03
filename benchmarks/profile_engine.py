"""Profile the crawl engine in one process, without Celery: where does a page's CPU go?

    .venv/bin/python benchmarks/profile_engine.py URL [--pages N] [--spider titles | --extract R]

Runs the scheduler's release and ``engine.process`` inline on a fresh job (against
``DATABASE_URL``/``REDIS_URL`` as configured), prints the SQL statements per page by kind and
a pyinstrument profile of the whole run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crawlplatform.settings")
os.environ.setdefault("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")  # the local site
os.environ.setdefault("CRAWL_SPIDER_MODULES", "bench_spiders")  # --spider's

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from pyinstrument import Profiler  # noqa: E402

from tasks import engine  # noqa: E402
from tasks.frontier import jobs, release  # noqa: E402
from tasks.frontier.pacing import Pacing  # noqa: E402
from web.management import crawling  # noqa: E402
from web.models import FrontierURL, URLState  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--pages", type=int, default=500)
    parser.add_argument("--no-profile", action="store_true", help="time only: no profiler")
    parser.add_argument("--spider", help="crawl with this spider of benchmarks/bench_spiders.py")
    parser.add_argument(
        "--extract",
        action="append",
        default=[],
        metavar="NAME=SELECTOR",
        help="crawl with this extraction rule (as the crawl command's)",
    )
    args = parser.parse_args()
    statements: Counter[str] = Counter()

    def count(execute, sql, params, many, context):
        statements[re.sub(r"\s+", " ", sql)[:60]] += 1
        return execute(sql, params, many, context)

    spider = {"spider": args.spider} if args.spider else {}
    rules = crawling.parse_rules(args.extract, "")
    job = jobs.create_job([args.url], max_depth=100, max_pages=args.pages, extract=rules, **spider)
    jobs.start(job)
    release.publish = lambda rows: None  # messages are not needed: we process inline
    profiler = Profiler()
    pacing = Pacing()  # what the scheduler remembers between passes
    if args.spider:  # this process is the worker that has the spider
        pacing.spiders = lambda: frozenset([args.spider])
    done = 0
    started = time.process_time()
    with connection.execute_wrapper(count), nullcontext() if args.no_profile else profiler:
        while True:
            job.refresh_from_db()
            release.release(job, pacing)
            ids = list(
                FrontierURL.objects.filter(job=job, state=URLState.SCHEDULED).values_list(
                    "id", flat=True
                )
            )
            if not ids:
                break
            for url_id in ids:
                engine.process(url_id, job.pk)
                done += 1
    cpu = time.process_time() - started
    print(f"{done} pages, {1000 * cpu / done:.2f} ms CPU per page in this process")
    for sql, n in statements.most_common(15):
        print(f"{n / done:6.2f}/page  {sql}")
    if not args.no_profile:
        profiler.print(show_all=False)


if __name__ == "__main__":
    main()
