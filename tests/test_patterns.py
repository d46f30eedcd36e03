"""User patterns run on RE2: linear in the text whatever the pattern, refused at save time when
RE2 cannot compile them, and the same answers as Python's re for the patterns URLs need."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler

import pytest

from tasks.rules import patterns, selectors
from tasks.rules.urls import Scope
from tests.conftest import FAST, crawl_to_end
from tests.site import LocalSite, send
from web.models import CrawlJob, FrontierURL

EVIL = "(a+)+$"  # Python's re takes seconds on 26 characters, four times more every two


def _finishes_within(seconds: float, call) -> object:
    found: list = []
    thread = threading.Thread(target=lambda: found.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still matching after {seconds} s"
    return found[0]


def test_a_backtracking_pattern_is_matched_in_linear_time():
    long_url = "http://shop.test/" + "a" * 5000 + "!"
    scope = Scope(("shop.test",), True, patterns.compiled(()), patterns.compiled((EVIL,)),
                  5, 10_000)  # fmt: skip
    assert _finishes_within(5, lambda: scope.allows(long_url)) is True
    assert _finishes_within(5, lambda: scope.allows("http://shop.test/aaaa")) is False
    rules = selectors.rules_of([{"name": "t", "selector": "h1", "pattern": EVIL}])
    assert _finishes_within(5, lambda: selectors.applies(rules, long_url)) == []


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [
        (r"/docs/\d+/", "http://h/docs/12/x", True),
        (r"\.(pdf|zip)$", "http://h/a.zip", True),
        (r"\.(pdf|zip)$", "http://h/a.zip?x", False),
        (r"(?i)/CART", "http://h/cart", True),
        (r"^https://", "http://h/", False),
        (r"[?&]page=\d+", "http://h/?a=1&page=3", True),
    ],
)
def test_patterns_answer_as_python_re_does_for_url_patterns(pattern, text, found):
    assert patterns.problem(pattern) == ""
    assert patterns.search(pattern, text) is found


def test_several_patterns_are_searched_together_and_say_which_matched():
    both = patterns.compiled((r"/a/", r"/b/", r"\d+$"))
    assert both.matching("http://h/a/7") == [0, 2]
    assert both.matching("http://h/c/") == [] and not both.any("http://h/c/")
    assert not patterns.compiled(()).any("anything")


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (r"(?=x)y", "no backreferences or lookaround"),
        (r"(a)\1", "no backreferences or lookaround"),
        ("(", "missing )"),
        ("a" * 1001, "1000 characters at most"),
        (7, "is not a string"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_with_its_reason(pattern, words):
    assert words in patterns.problem(pattern)


@pytest.mark.django_db
def test_a_job_with_such_a_pattern_is_refused_when_saved():
    job = CrawlJob(seeds=["http://shop.test/"], exclude_patterns=[r"(?<=x)y"],
                   path_caps={r"(a)\1": 5}, extract=[{"name": "t", "selector": "h1",
                                                     "pattern": r"(?!z)"}])  # fmt: skip
    found = job.problems(seeds=False)
    assert {"exclude_patterns", "path_caps", "extract"} <= found.keys()
    job = CrawlJob(seeds=["http://shop.test/"], exclude_patterns=[EVIL], path_caps={EVIL: 5})
    assert not job.problems(seeds=False)  # RE2 runs it in linear time: nothing to refuse


class Trap(LocalSite):
    """A home page linking to URLs that make (a+)+$ backtrack for ever in Python's re (runs
    of 'a' that end in '!'), and to pages that a path cap keeps to three."""

    def __init__(self) -> None:
        links = [f"/{'a' * n}!" for n in range(30, 60)] + [f"/keep/{n}" for n in range(10)]
        home = "".join(f'<a href="{link}">x</a>' for link in links).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/robots.txt":
                    send(self, 404, {"Content-Type": "text/plain"}, b"")
                else:
                    send(self, 200, {}, b"<h1>t</h1>" + (home if self.path == "/" else b""))

            def log_message(self, *args) -> None:
                pass

        super().__init__(Handler)


@pytest.mark.django_db(transaction=True)
def test_a_crawl_with_backtracking_patterns_everywhere_finishes_with_its_caps(redis, tmp_path):
    with Trap() as site:
        job, _ = crawl_to_end(
            site.url("/"), tmp_path, {**FAST, "CRAWL_ALLOWED_NETWORKS": "127.0.0.0/8"},
            processes=1, concurrency=4, timeout=120, exclude_patterns=[EVIL],
            path_caps={EVIL: 1, "/keep/": 3},
            extract=[{"name": "t", "selector": "h1", "pattern": EVIL}],
        )  # fmt: skip
    rows = FrontierURL.objects.filter(job=job)
    assert job.state == "finished"
    assert rows.filter(url__contains="aaa!", state="done").count() == 30  # the cap is not theirs
    assert rows.filter(url__contains="/keep/", state="done").count() == 3
    assert rows.filter(url__contains="/keep/", error_reason="path_cap").count() == 7
    assert not rows.filter(error_reason="lease_expired").exists()  # leases renewed on time
