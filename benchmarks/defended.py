"""Crawl a defended site several times in a row with ``manage.py crawl`` on the embedded
defaults, with identities (proxies, user agents) and ``--render auto``, then once plainly, and
print per run the real pages found per section, what was stored that is not a real page, the
CAPTCHA pages in review, and the seconds.

    .venv/bin/python benchmarks/defended.py               # five runs and a plain one
    .venv/bin/python benchmarks/defended.py --runs 1 --no-plain --busy 20

The site is ``tests/defended.py`` (one host: a cookie gate, an open section, a gated section,
a busy section that bans each identity part after a burst, a CAPTCHA, a JavaScript-built
section); three local forward proxies reach it from their own loopback addresses
(``tests/antibot.py``). Each run has a new data directory (SQLite and a private Redis, as
README's first command).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, machine_speed  # noqa: E402
from tests.antibot import ForwardProxy  # noqa: E402
from tests.defended import DefendedSite  # noqa: E402

AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0",
          "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15"]  # fmt: skip


def crawl(site: DefendedSite, proxies: list[str], agents: list[str], work: Path,
          extra: list[str]) -> tuple[dict, float, str]:  # fmt: skip
    """One ``manage.py crawl`` of the site on a new data directory: its rows, seconds, log."""
    out = work / "out.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["CRAWL_DATA_DIR"] = str(work / "data")
    if os.geteuid() == 0:  # Chromium's sandbox does not run as root (tests/budgets.py)
        env.setdefault("CRAWL_RENDER_NO_SANDBOX", "true")
    args = [sys.executable, "manage.py", "crawl", site.url("/"), "--render", "auto",
            "--allow-network", "127.0.0.0/8", "--max-depth", "4", "--output", str(out), *extra]
    for proxy in proxies:
        args += ["--proxy", proxy]
    for agent in agents:
        args += ["--user-agent", agent]
    began = time.monotonic()
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - began
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
    rows = {}
    if out.exists():
        rows = {r["url"][len(site.base):]: r for r in map(json.loads, out.read_text().splitlines())}
    return rows, took, done.stdout + done.stderr


def judge(site: DefendedSite, rows: dict) -> dict:
    """Real pages found per section, what was stored that is no real page, CAPTCHAs in review."""
    stored = {p for p, r in rows.items() if r["error"] is None}
    found = {name: (len(paths & stored), len(paths)) for name, paths in site.sections().items()}
    extra = sorted(stored - site.real_pages())
    blocks = sorted(p for p, r in rows.items() if r["error"] is None
                    and (r["title"] or "").lower() in ("access denied", "sorry", "just a moment"))
    review = sum(1 for p in site.captcha_pages()
                 if ((rows.get(p) or {}).get("error") or "").startswith("needs_review"))
    lost = {p: rows[p]["error"] if p in rows else "never found"
            for p in sorted(site.real_pages() - stored)}  # fmt: skip
    return {"found": found, "extra": extra, "blocks": blocks, "review": review, "lost": lost}


def show(label: str, site: DefendedSite, verdict: dict, took: float) -> None:
    real = sum(n for n, _ in verdict["found"].values())
    expected = sum(m for _, m in verdict["found"].values())
    sections = " ".join(f"{name} {n}/{m}" for name, (n, m) in verdict["found"].items())
    print(f"{label}: {real}/{expected} real pages in {took:.1f} s ({sections}); CAPTCHA in "
          f"review {verdict['review']}/{len(site.captcha_pages())}; blocks stored "
          f"{len(verdict['blocks'])}; other stored {len(verdict['extra'])}", flush=True)
    for path, why in list(verdict["lost"].items())[:8]:
        print(f"    lost {path}: {why}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-plain", action="store_true", help="skip the plain crawl")
    parser.add_argument("--busy", type=int, default=40, help="pages of the busy section")
    parser.add_argument("--keep", action="store_true", help="keep the data directories")
    parser.add_argument("crawl_args", nargs="*", help="more arguments for manage.py crawl")
    opts = parser.parse_args()
    print(machine_speed(), flush=True)
    work = Path(tempfile.mkdtemp(prefix="defended-"))
    failed = False
    with (
        ForwardProxy("127.0.0.2") as one,
        ForwardProxy("127.0.0.3") as two,
        ForwardProxy("127.0.0.4", kind="socks5") as three,
    ):
        proxies = [one.url(), two.url(), three.url()]
        for run in range(opts.runs):
            with DefendedSite(busy=opts.busy) as site:
                rows, took, log = crawl(site, proxies, AGENTS, work / f"run{run}", opts.crawl_args)
                verdict = judge(site, rows)
            (work / f"run{run}.log").write_text(log)
            show(f"run {run + 1}", site, verdict, took)
            failed |= bool(verdict["lost"] or verdict["blocks"] or verdict["extra"])
        if not opts.no_plain:
            with DefendedSite(busy=opts.busy) as site:
                rows, took, log = crawl(site, [], [], work / "plain", opts.crawl_args)
                verdict = judge(site, rows)
            (work / "plain.log").write_text(log)
            show("plain", site, verdict, took)
    if opts.keep:
        print(f"data and logs in {work}")
    else:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
