"""Seed a job with a million URLs and time it until they are durable and schedulable.

    .venv/bin/python benchmarks/seed_million.py [--urls 1000000] [--hosts 20000]

Writes a seed file (a million distinct URLs over many hosts, plus repeats of them in other
spellings and lines that are not URLs), creates a draft job in a fresh PostgreSQL database
``crawlbench_seed``, then runs ``manage.py seed JOB FILE`` and prints: wall seconds, URLs per
second, CPU seconds of the command (its canonicalizer processes included) and of PostgreSQL,
the command's peak RSS, and the frontier's size on disk per URL. It then checks the result in
the database (every distinct URL queued once, at depth 0, due now) and times one scheduler
pass over the seeded job.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from common import POSTGRES, ROOT, Sampler, fresh_database, migrate, service_cpu


def write_seed_file(path: Path, urls: int, hosts: int) -> int:
    """Write ``urls`` distinct URLs, with repeats and non-URLs among them; returns the lines."""
    rng = random.Random(7)
    unique = lines = 0
    with path.open("w") as f:
        while unique < urls:
            lines += 1
            r = rng.random()
            if r < 0.01:  # rejected: not an http(s) URL
                f.write("mailto:someone@example.com\n")
            elif r < 0.03 and unique:  # a URL seen before, spelled differently: a duplicate
                j = rng.randrange(unique)
                f.write(f"HTTPS://Host{j % hosts}.Example.com:443/item/{j}?b=2&a=1#top\n")
            else:
                f.write(f"https://host{unique % hosts}.example.com/item/{unique}?a=1&b=2\n")
                unique += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=20_000)
    parser.add_argument("--postgres", default=POSTGRES)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        seed_file = Path(tmp) / "seeds.txt"
        unique = args.urls
        lines = write_seed_file(seed_file, unique, args.hosts)
        print(
            f"seed file: {lines:,} lines, {unique:,} distinct URLs, "
            f"{seed_file.stat().st_size / 2**20:.0f} MB"
        )
        database_url = fresh_database(args.postgres, "crawlbench_seed")
        env = {**os.environ, "DATABASE_URL": database_url, "LOG_LEVEL": "WARNING"}
        env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
        migrate(env)
        create = (
            "from tasks.frontier.jobs import create_job;"
            "print(create_job(['https://host0.example.com/'], name='seed benchmark').pk)"
        )
        job_id = int(subprocess.run(
            [sys.executable, "manage.py", "shell", "-v0", "-c", create],
            cwd=ROOT, env=env, check=True, capture_output=True, text=True,
        ).stdout.strip())  # fmt: skip

        pg0 = service_cpu(("postgres",))
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "seed", str(job_id), str(seed_file)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        sampler = Sampler(proc.pid, interval=0.05)
        sampler.start()
        out, err = proc.communicate()
        wall = time.monotonic() - t0
        sampler.done.set()
        pg_cpu = service_cpu(("postgres",)) - pg0
        if proc.returncode:
            sys.exit(f"seed failed ({proc.returncode}):\n{err}")
        print(err.strip().splitlines()[-1])
        print(out.strip())
        command_cpu = sum(sampler.by_role().values())

    with psycopg.connect(database_url) as conn:
        queued, depth0, due = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE depth = 0),"
            " count(*) FILTER (WHERE not_before <= now())"
            " FROM web_frontierurl WHERE job_id = %s AND state = 'queued'",
            [job_id],
        ).fetchone()
        size = conn.execute(
            "SELECT pg_total_relation_size('web_frontierurl'), pg_relation_size('web_frontierurl')"
        ).fetchone()
    added = int(re.search(r"([\d,]+) URLs added", out).group(1).replace(",", ""))
    checks = {
        "every distinct URL added once": added == unique,
        "all queued at depth 0": queued == depth0 == unique + 1,  # + the job's own seed
        "all due now": due == queued,
    }

    code = (
        "import time;from tasks.frontier import release;from tasks.frontier.pacing import Pacing;"
        "from web.models import CrawlJob;"
        f"job=CrawlJob.objects.get(pk={job_id});t=time.perf_counter();"
        "n,_=release.release(job,Pacing());print(n, time.perf_counter()-t)"
    )
    released, pass_s = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v0", "-c", code],
        cwd=ROOT, env={**env, "REDIS_URL": "redis://127.0.0.1:6379/14"},
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip

    print(f"\n{'URLs seeded':<36}{added:>14,}")
    print(f"{'wall s':<36}{wall:>14.1f}")
    print(f"{'URLs/s':<36}{added / wall:>14,.0f}")
    print(f"{'CPU s, seed command (all processes)':<36}{command_cpu:>14.1f}")
    print(f"{'CPU s, PostgreSQL':<36}{pg_cpu:>14.1f}")
    print(f"{'peak RSS MB, seed command':<36}{sampler.peak / 2**20:>14.0f}")
    print(f"{'frontier bytes/URL (table+indexes)':<36}{size[0] / queued:>14.0f}")
    print(f"{'frontier bytes/URL (table only)':<36}{size[1] / queued:>14.0f}")
    print(f"{'first scheduler pass: released':<36}{int(released):>14,}")
    print(f"{'first scheduler pass: seconds':<36}{float(pass_s):>14.3f}")
    for name, ok in checks.items():
        print(f"check: {name}: {'ok' if ok else 'FAILED'}")
    target = "met" if wall <= 60 and all(checks.values()) else "NOT met"
    print(f"\ntarget (1,000,000 URLs durable and schedulable in <= 60 s): {target}")


if __name__ == "__main__":
    main()
