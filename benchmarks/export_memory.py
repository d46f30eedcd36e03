"""Peak memory of ``manage.py export`` against the size of the job: it must stay flat.

    .venv/bin/python benchmarks/export_memory.py [--sizes 10000,100000]

For each size, a fresh PostgreSQL database (``exportbench``) gets one finished job with that
many URLs and pages (each with extracted data and recorded headers; 1,000 distinct stored
bodies of 8-60 KB shared by the pages, in a temporary body store). Each format is then
exported to a file by ``manage.py export`` as a subprocess while its peak RSS is sampled.
Printed per size and format: rows, seconds, rows/s, output size, peak RSS.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import POSTGRES, ROOT, Sampler, django_shell, fresh_database, migrate

FILL = """
import random, json
from django.db import connection
from tasks.content import bodies
from web.models import CrawlJob
job = CrawlJob.objects.create(name="export bench", seeds=["http://bench.local/"],
    state="finished", extract=[{{"name": "title", "selector": "h1"}},
                               {{"name": "links", "selector": "a", "all": True, "attr": "href"}}])
rng = random.Random(1)
keys = [bodies.put(job.pk, (f"<html><h1>{{i}}</h1>" + "x" * rng.randint(8000, 60000)).encode())
        for i in range(1000)]
http = json.dumps({{"protocol": "HTTP/1.1", "reason": "OK",
    "request": [["User-Agent", "crawlplatform/1.0"], ["Accept-Encoding", "gzip, deflate"]],
    "response": [["Content-Type", "text/html; charset=utf-8"], ["ETag", '"abc"'],
                 ["Last-Modified", "Tue, 14 Nov 2023 22:13:20 GMT"], ["Server", "bench"]]}})
with connection.cursor() as c:
    c.execute('''INSERT INTO web_frontierurl (job_id, url, host, depth, state, attempts, released,
                 ladder_level, not_before, error_reason, error_message, http_status, updated_at)
                 SELECT %s, 'http://bench.local/p/' || i, 'bench.local', 3, 'done', 1, true, 0,
                        now(), '', '', 200, now() FROM generate_series(1, %s) AS i''',
              [job.pk, {size}])
    c.execute('''INSERT INTO web_page (job_id, url_id, final_url, status, content_type, title,
                 size, truncated, elapsed_ms, fetched_at, content_hash, data, body_key, http,
                 run, first_run, modified_run, checked_at)
                 SELECT job_id, id, url, 200, 'text/html', 'Page ' || id, 30000, false, 12,
                        now(), md5(url) || md5(url),
                        json_build_object('title', 'Page ' || id,
                                          'links', json_build_array('/a', '/b', '/c')),
                        (%s::text[])[1 + id %% 1000], %s::jsonb, 1, 1, 1, now()
                 FROM web_frontierurl WHERE job_id = %s''', [keys, http, job.pk])
print(job.pk)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    args = parser.parse_args()
    random.seed(1)
    for size in [int(s) for s in args.sizes.split(",")]:
        store = tempfile.mkdtemp(prefix="export-bodies-")
        env = {**os.environ, "DATABASE_URL": fresh_database(POSTGRES, "exportbench"),
               "BODY_STORE": store, "LOG_LEVEL": "WARNING"}  # fmt: skip
        migrate(env)
        job_id = django_shell(env, FILL.format(size=size)).splitlines()[-1]
        for fmt in ("jsonl", "csv", "warc"):
            out = Path(tempfile.gettempdir()) / f"export-bench.{fmt}.gz"
            started = time.monotonic()
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "export", job_id, "--output", str(out)],
                cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            sampler = Sampler(proc.pid, interval=0.05)
            sampler.start()
            proc.wait()
            sampler.done.set()
            seconds = time.monotonic() - started
            if proc.returncode:
                sys.exit(f"export {fmt} failed ({proc.returncode})")
            print(f"{size:>7} pages {fmt:<5}: {seconds:6.1f} s, {size / seconds:7.0f} rows/s, "
                  f"{out.stat().st_size / 2**20:7.1f} MiB out, peak RSS "
                  f"{sampler.peak / 2**20:6.1f} MiB", flush=True)  # fmt: skip
            out.unlink()


if __name__ == "__main__":
    main()
