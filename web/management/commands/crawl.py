"""``python manage.py crawl SEED ...``: create a job and run it to completion.

With no ``DATABASE_URL`` and no ``REDIS_URL`` it runs on the embedded defaults (SQLite and a
private redis-server in ``CRAWL_DATA_DIR``). It starts its own workers (``--workers``) and the
scheduler, shows a live progress line, writes ``--output`` and prints a summary. Ctrl-C pauses
the job (in-flight pages finish, a checkpoint is written, ``--output`` holds what was done);
``--resume JOB`` (its name or id) continues it. ``--recrawl JOB`` runs an ended job again
with conditional requests and reports what is new, changed, unchanged and gone.
``--workers 0`` leaves the fetching to external workers (``celery -A crawlplatform worker``).
With ``LOG_FORMAT=json`` what it says (the job, its workers, the progress, the summary) is
log lines on standard error, like the rest of its lines (``web/management/crawling.py``).

It rides out a database or Redis outage (a failover, a restart): the progress loop, the
scheduler and the final summary wait with a bounded backoff, say so once, and carry on. The
workers and the private redis-server it starts end with it, however it ends.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time

from django.conf import settings
from django.core.management.base import CommandError, CommandParser

from crawlplatform import logs
from crawlplatform.embedded import EmbeddedRedis
from tasks.defaults import setting
from tasks.frontier import jobs
from tasks.frontier.scheduler import Scheduler
from tasks.worker import supervisor
from tasks.worker.supervisor import WorkerPool, WorkerStartupError
from web.management import crawling
from web.management.base import PlatformCommand, Say
from web.models import TERMINAL_STATES, CrawlJob, JobState

log = logging.getLogger(__name__)


def step(name: str) -> None:
    """Log, at DEBUG, that a start-up step ended, with the CPU this process has spent so far
    (``benchmarks/first_request.py`` reads it)."""
    log.debug("crawl start-up: %s at %.6f, %.3f s CPU", name, time.time(), time.process_time())


class Command(PlatformCommand):
    help = "Crawl from SEED URLs to completion and write the results."
    # Django's system checks load the URL configuration and the admin, a quarter second of
    # CPU this long-running process does not need; `migrate` (every deployment) runs them.
    requires_system_checks: list = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("seeds", nargs="*", metavar="SEED", help="start URL(s)")
        parser.add_argument("--seeds", dest="seeds_file", default=None, metavar="FILE",
                            help="start URLs from FILE too, one per line ('-': standard "
                            "input; .gz is decompressed; # starts a comment)")  # fmt: skip
        parser.add_argument(
            "--allow-domain",
            action="append",
            default=[],
            metavar="D",
            help="a domain the crawl may visit (repeatable; default: the seeds' hosts)",
        )
        parser.add_argument("--max-depth", type=int, default=None, metavar="N",
                            help="links followed from a seed (default 5; a spider's requests: "
                            "no limit but the platform's)")  # fmt: skip
        parser.add_argument("--max-pages", type=int, default=None, metavar="N",
                            help="pages fetched at most (retries not counted; default: no "
                            "limit)")  # fmt: skip
        parser.add_argument(
            "--concurrency",
            type=int,
            default=8,
            metavar="N",
            help="pages fetched at once, over all workers (default: 8)",
        )
        parser.add_argument(
            "--delay",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="minimum gap between two requests to one host, in seconds, from the end "
            "of the one before too under --host-concurrency (default: 0, robots.txt's "
            "Crawl-delay and the host's own pace still apply)",
        )
        parser.add_argument(
            "--host-concurrency",
            type=int,
            default=0,
            metavar="N",
            help="requests in flight to one host at most (default: 0, no limit)",
        )
        parser.add_argument("--max-pages-per-host", type=int, default=None, metavar="N",
                            help="pages fetched at most per host (default: no limit)")  # fmt: skip
        parser.add_argument(
            "--include",
            action="append",
            default=[],
            metavar="REGEX",
            help="follow only URLs matching one of these (repeatable)",
        )
        parser.add_argument(
            "--exclude",
            action="append",
            default=[],
            metavar="REGEX",
            help="never follow URLs matching any of these (repeatable)",
        )
        parser.add_argument(
            "--no-subdomains",
            action="store_true",
            help="stay on the allowed hosts exactly, without their subdomains",
        )
        parser.add_argument(
            "--sitemaps", action="store_true", help="also start from the hosts' sitemaps"
        )
        parser.add_argument(
            "--ignore-robots", action="store_true", help="do not fetch or obey robots.txt"
        )
        parser.add_argument(
            "--user-agent",
            action="append",
            default=[],
            metavar="UA",
            help="a User-Agent to present (repeatable: a pool, rotated per host when a site "
            "blocks; default: the platform's own)",
        )
        parser.add_argument(
            "--proxy",
            action="append",
            default=[],
            metavar="URL",
            help="a proxy (http, https, socks4 or socks5 URL; credentials as ${CRAWL_PROXY_*} "
            "variables of the workers' environment, e.g. "
            "http://${CRAWL_PROXY_USER}:${CRAWL_PROXY_PASSWORD}@proxy:3128; repeatable)",
        )
        parser.add_argument(
            "--header",
            action="append",
            default=[],
            metavar='"NAME: VALUE"',
            help="an extra request header (repeatable)",
        )
        parser.add_argument(
            "--warmup", default="", metavar="PATH",
            help="a path fetched first by each new session of a host (e.g. / that sets a "
            "cookie; default: none, a refused identity warms up on the seed)",
        )  # fmt: skip
        parser.add_argument(
            "--render",
            default="never",
            choices=["never", "auto", "always"],
            help="render pages in headless Chromium: never (default), when the anti-bot "
            "ladder or a page that needs JavaScript asks (auto), or always (needs "
            "requirements-render.txt and Debian's chromium)",
        )
        parser.add_argument(
            "--allow-network",
            action="append",
            default=[],
            metavar="CIDR",
            help="a non-public network the crawl may fetch from, e.g. 10.0.0.0/8 or "
            "127.0.0.0/8 (repeatable; public addresses need none)",
        )
        parser.add_argument(
            "--extract",
            action="append",
            default=[],
            metavar="NAME=SELECTOR",
            help="a field to extract from HTML pages with a CSS selector: NAME=SELECTOR (text "
            "of the first match), NAME=SELECTOR@ATTR (an attribute), NAME=SELECTOR[] (every "
            "match), e.g. title=h1 or links=a[]@href (repeatable)",
        )
        parser.add_argument("--extract-pages", default="", metavar="REGEX",
                            help="apply --extract only on URLs matching this (default: every "
                            "page)")  # fmt: skip
        parser.add_argument("--no-bodies", action="store_true",
                            help="do not keep raw page bodies in the body store")  # fmt: skip
        parser.add_argument("--obey-nofollow", action="store_true",
                            help='do not follow links marked rel="nofollow"')  # fmt: skip
        parser.add_argument("-o", "--output", default=None, metavar="FILE|-|FORMAT",
                            help=crawling.OUTPUT_HELP + "; a spider job's are its items; "
                            "written after Ctrl-C too (default: none)")  # fmt: skip
        parser.add_argument("--format", choices=crawling.ALL_FORMATS, default=None,
                            help=crawling.FORMAT_HELP)  # fmt: skip
        parser.add_argument("--spider", default="", metavar="NAME",
                            help="run the installed spider NAME (manage.py spiders lists them); "
                            "SEEDs are optional then")  # fmt: skip
        parser.add_argument("-a", dest="spider_args", action="append", default=[],
                            metavar="NAME=VALUE",
                            help="a spider argument, set as its attribute (repeatable)",
                            )  # fmt: skip
        parser.add_argument("--name", default=None,
                            help="the job's name, to find it by later (default: the spider's "
                            "name or the first seed)")  # fmt: skip
        parser.add_argument(
            "--resume", default=None, metavar="JOB", help="continue a paused job (its name or id)"
        )
        parser.add_argument(
            "--recrawl", default=None, metavar="JOB",
            help="run an ended job (its name or id) again: pages are asked for with "
            "If-None-Match / If-Modified-Since and only changed ones are downloaded",
        )  # fmt: skip
        parser.add_argument(
            "--workers",
            type=int,
            default=None,
            metavar="N",
            help="worker processes to start (default: one per core, at most "
            "--concurrency); 0 waits for external workers",
        )
        parser.add_argument(
            "--pool",
            default="threads",
            choices=["threads", "prefork", "solo"],
            help="Celery pool of the started workers (default: threads; see "
            "docs/benchmarks.md)",
        )

    def handle(self, *args, **opts) -> None:
        if opts["seeds_file"]:
            if opts["resume"] is not None or opts["recrawl"] is not None:
                raise CommandError("--seeds starts a new job: not with --resume or --recrawl "
                                   "(manage.py seed JOB FILE adds URLs to a job)")  # fmt: skip
            opts["seeds"] = [*opts["seeds"], *crawling.seeds_from(opts["seeds_file"])]
        if (not opts["seeds"] and not opts["spider"] and opts["resume"] is None
                and opts["recrawl"] is None):  # fmt: skip
            raise CommandError("give at least one SEED URL, --spider NAME, --resume JOB or "
                               "--recrawl JOB")  # fmt: skip
        if opts["spider_args"] and not opts["spider"]:
            raise CommandError("-a NAME=VALUE needs --spider")
        if opts["output"] == "-" and opts["format"] is None:
            raise CommandError("--output -: give --format jsonl, csv or warc (or -o jsonl)")
        later = opts["resume"] is not None or opts["recrawl"] is not None  # a job of either kind
        items = True if opts["spider"] else (None if later else False)
        output = crawling.output_target(opts["output"], opts["format"], items)
        if opts["concurrency"] < 1:
            raise CommandError("--concurrency must be at least 1")
        step("command loaded")
        self.say = Say(self.stderr, log)
        self.apart = crawling.ResultsApart() if output is not None and output[1] == "-" else None
        # The private redis-server starts in the background: until the job is created, which
        # needs it, this process prepares its workers and its database.
        embedded = EmbeddedRedis(settings.DATA_DIR) if settings.EMBEDDED_REDIS else None
        if embedded is not None:
            embedded.launch()
        try:
            if embedded is None:
                crawling.reachable()
            if opts["workers"] != 0:
                supervisor.preload()
                step("workers' modules loaded")
            step("database " + crawling.prepare_database())
            if embedded is not None:
                embedded.wait()
                step("redis-server answers")
            job = self._job(opts, fresh_broker=embedded is not None)
            step("job started")
            with logs.about(crawl_job=job.pk, spider=job.spider):
                code = self._run(job, opts, output)
        finally:
            if embedded is not None:
                embedded.stop()
            if self.apart is not None:
                self.apart.back()
        if code:
            sys.exit(code)

    def _job(self, opts: dict, fresh_broker: bool) -> CrawlJob:
        if opts["recrawl"] is not None:
            job = crawling.job_named(opts["recrawl"])
            crawling.output_replaces_feeds_again(job, opts["output"])  # before its run starts
            if not jobs.recrawl(job):
                raise CommandError(f"job {job.pk} is {job.state}; only an ended job is recrawled")
            self.say(f"job {job.pk} ({job.name}): run {job.run} started", crawl_job=job.pk)
            return job
        if opts["resume"] is not None:
            job = crawling.job_named(opts["resume"])
            if job.state in TERMINAL_STATES:
                raise CommandError(f"job {job.pk} is {job.state}; nothing to resume")
            crawling.output_replaces_feeds_again(job, opts["output"])
            if fresh_broker:
                # The private broker starts empty and no other worker can hold a lease on it.
                n = jobs.requeue_in_flight(job.pk)
                self.say(f"job {job.pk}: {n} URLs requeued from the last run", crawl_job=job.pk)
            if job.state == JobState.PAUSED:
                jobs.resume(job)
            elif job.state == JobState.DRAFT:
                jobs.start(job)
            self.say(f"resuming job {job.pk} ({job.name})", crawl_job=job.pk)
            return job
        try:
            job = jobs.create_job(
                opts["seeds"],
                name=opts["name"] or opts["spider"] or opts["seeds"][0],
                spider=opts["spider"],
                spider_args=crawling.parse_spider_args(opts["spider_args"]),
                allowed_domains=opts["allow_domain"],
                **({"max_depth": opts["max_depth"]} if opts["max_depth"] is not None else {}),
                max_pages=opts["max_pages"],
                delay=opts["delay"],
                host_concurrency=opts["host_concurrency"],
                max_pages_per_host=opts["max_pages_per_host"],
                include_patterns=opts["include"],
                exclude_patterns=opts["exclude"],
                include_subdomains=not opts["no_subdomains"],
                use_sitemaps=opts["sitemaps"],
                obey_robots=not opts["ignore_robots"],
                settings={**crawling.allowed_networks(opts["allow_network"]),
                          **crawling.output_replaces_feeds(opts["spider"], opts["output"])},
                user_agents=opts["user_agent"],
                proxies=opts["proxy"],
                headers=crawling.parse_headers(opts["header"]),
                warmup_path=opts["warmup"],
                render=opts["render"],
                extract=crawling.parse_rules(opts["extract"], opts["extract_pages"]),
                store_bodies=not opts["no_bodies"],
                obey_nofollow=opts["obey_nofollow"],
            )
        except jobs.JobError as exc:
            lines = [
                f"{crawling.OPTION_OF.get(field, field)}: {message}"
                for field, messages in exc.fields.items()
                for message in messages
            ]
            raise CommandError("; ".join(lines) or str(exc)) from None
        jobs.start(job)
        if job.state == JobState.FAILED:
            raise CommandError(f"job {job.pk} failed at start: {job.error}")
        what = f"spider {job.spider}" if job.spider else crawling.seed_list(job.seeds)
        self.say(f"job {job.pk} started: {what}", crawl_job=job.pk)
        return job

    def _can_render(self, job: CrawlJob) -> bool:
        """Whether a render worker can start beside the crawl's workers for a job that renders;
        where Chromium cannot run, a warning, and no page is handed to one (``RENDER_WORKERS``
        off for this command and the workers it forks: call before they are)."""
        from tasks.fetch import render

        if why := render.unavailable():
            os.environ["CRAWL_RENDER_WORKERS"] = "false"
            self.say(f"warning: --render {job.render}: no page is rendered: {why}")
            return False
        return True

    def _run(self, job: CrawlJob, opts: dict, output: tuple[str, str] | None) -> int:
        concurrency = opts["concurrency"]
        processes = opts["workers"]
        if processes is None:
            processes = min(os.cpu_count() or 1, concurrency)
        pool = None
        pools: list[WorkerPool] = []
        if processes > 0:
            rendering = job.render != "never" and self._can_render(job)
            pool = WorkerPool(
                processes,
                math.ceil(concurrency / processes),
                pool=opts["pool"],
                env={"REDIS_URL": settings.REDIS_URL} if settings.EMBEDDED_REDIS else None,
                log_dir=settings.DATA_DIR / "logs" / f"job{job.pk}",
                fork=True,  # workers forked from this process skip its imports (supervisor.py)
            )
            pool.start()
            step("workers forked")
            pools.append(pool)
            how = ", forked" if pool.forks else ""
            self.say(f"{processes} worker(s) x {pool.concurrency} ({opts['pool']}{how}); logs in "
                     f"{pool.log_dir}", workers=processes, logs=str(pool.log_dir))  # fmt: skip
            if rendering:
                renderers = WorkerPool(
                    1, setting("RENDER_CONCURRENCY", job), pool="prefork",
                    env=pool.env, log_dir=pool.log_dir, queue=settings.RENDER_QUEUE,
                    prefix="render",
                )  # fmt: skip
                renderers.start()
                pools.append(renderers)
        else:
            self.say("waiting for external workers on queue " + settings.CRAWL_QUEUE)
        woken = threading.Event()  # the progress loop looks at the job's state now
        scheduler = Scheduler(on_finished=lambda pk: pk == job.pk and woken.set())
        thread = threading.Thread(target=scheduler.run, name="scheduler", daemon=True)
        thread.start()
        step("scheduler started")
        interrupted, hurry = threading.Event(), threading.Event()

        def stop(*_) -> None:
            (hurry if interrupted.is_set() else interrupted).set()
            woken.set()

        # Ctrl-C, or a TERM from a process manager: pause the job and stop the workers warm
        # (they run in their own sessions, so nothing else would stop them); a second one
        # stops them at once.
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        started = time.monotonic()
        try:
            crawling.show_progress(job, pools, interrupted, started, self.say, woken)
        except WorkerStartupError as exc:
            jobs.pause(job)
            raise CommandError(
                f"{exc}. Job {job.pk} is paused; fix the cause and resume it "
                f"with: python manage.py crawl --resume {job.pk}"
            ) from None
        finally:
            if interrupted.is_set():
                crawling.with_database(lambda: jobs.pause(job), "pausing the job", patience=60)
                self.say("\npausing: in-flight pages finish (Ctrl-C again: stop now) ...")
            for each in pools:  # a second Ctrl-C or TERM must not orphan the workers
                each.stop(grace=setting("FETCH_DEADLINE_S", job) + 15, hurry=hurry)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            scheduler.shutdown()
            thread.join(timeout=10)
            if self.apart is not None:  # what runs spider code has stopped
                self.apart.back()
        crawling.with_database(job.refresh_from_db, "reading the job")
        counts = crawling.with_database(lambda: jobs.counts(job.pk), "counting URLs")
        elapsed = time.monotonic() - started
        # With the results on standard output, what people read goes to standard error.
        said = self.say if output is not None and output[1] == "-" else Say(self.stdout, log)
        if interrupted.is_set():
            crawling.with_database(
                lambda: jobs.checkpoint(job, "interrupt"), "writing a checkpoint"
            )
            self.say(f"job {job.pk} paused with {counts['done']} pages done.", done=counts["done"])
            if output is not None:  # what was done so far (a second Ctrl-C stops at once)
                crawling.with_database(lambda: crawling.write_output(job, *output, self.say),
                                       "writing the results")  # fmt: skip
            self.say(
                f"Continue with: python manage.py crawl --resume {job.pk}; its results at any "
                f"time: python manage.py export {job.pk} -o FILE"
            )
            return 130
        crawling.with_database(lambda: crawling.summary(job, counts, elapsed, said),
                               "writing the summary")  # fmt: skip
        if output is not None:
            crawling.with_database(lambda: crawling.write_output(job, *output, said),
                                   "writing the results")  # fmt: skip
        return 0 if job.state == JobState.FINISHED else 1
