import random
from types import SimpleNamespace

from tasks.rules import urls
from tasks.rules.urls import Scope, canonicalize, host_of


def test_canonical_form_sorts_query_drops_fragment_default_port_and_lowercases_host():
    assert (
        canonicalize("HTTP://Example.COM:80/a/b?z=1&a=2#frag") == "http://example.com/a/b?a=2&z=1"
    )
    assert canonicalize("https://example.com:443/") == "https://example.com/"
    assert canonicalize("https://example.com:8443/x") == "https://example.com:8443/x"


def test_query_order_and_fragment_variants_are_one_url():
    variants = ["http://h/p?b=2&a=1", "http://h/p?a=1&b=2#x", "http://h/p?a=1&b=2"]
    assert len({canonicalize(v) for v in variants}) == 1


def test_percent_encoding_is_normalized():
    assert canonicalize("http://h/a%7eb/c d") == canonicalize("http://h/a~b/c%20d")


def test_non_http_schemes_are_not_urls_to_crawl():
    for url in ["mailto:a@b.c", "javascript:void(0)", "tel:+123", "data:text/html,x", "ftp://h/"]:
        assert canonicalize(url) is None


def test_links_already_canonical_take_the_short_way_to_the_same_form(monkeypatch):
    """``canonicalize`` recognises most links as canonical without w3lib; on URLs made of the
    characters and shapes that differ (escapes, dot segments, empty parameters, default and
    impossible ports, upper case, long hosts) its answer is w3lib's, always."""
    pieces = [*"aZ09.-_~/%?#:@!$&'()*+,;= \"<>\\^`{}|\t", "%7e", "%2F", "/./", "/../", "/.",
              "..", "\u00e9", "xn--", ":80", ":443", ":0", ":65536", ":080"]  # fmt: skip
    hosts = ["a.com", "A.com", "127.0.0.1", "a..com", "-a.com", "a.com.", "123", "a_b.com", "",
             "x" * 243, "x" * 244, "x" * 250 + ".com", "b\u00fccher.de"]  # fmt: skip
    ports = ["", "", ":80", ":443", ":8080", ":0", ":65535", ":65536", ":99999", ":1"]
    plain = [*"az09.-_~/!$&'()*+,=:@", "/x", "/p/1"]  # what the short way takes
    long_way = urls._canonical_form
    taken: list[str] = []
    monkeypatch.setattr(urls, "_canonical_form", lambda url: taken.append(url) or long_way(url))
    rng = random.Random(47)
    for n in range(20_000):
        path = "".join(rng.choice(plain if n % 2 else pieces) for _ in range(rng.randint(0, 8)))
        scheme = rng.choice(["http", "https", "HTTP", "ftp"])
        url = f"{scheme}://{rng.choice(hosts)}{rng.choice(ports)}{'/' * (rng.random() < 0.7)}{path}"
        assert canonicalize(url) == long_way(url.strip()), url
    assert 20_000 - len(taken) > 900  # both ways are compared, the short one on 900 URLs and more
    assert canonicalize(" http://a.com/x;p=1 ") == "http://a.com/x;p=1"
    assert canonicalize("http://a.com/x;") == "http://a.com/x"


def test_host_includes_non_default_port():
    assert host_of("http://127.0.0.1:8000/x") == "127.0.0.1:8000"


def job(**kw):
    base = dict(
        seeds=["https://example.com/"],
        allowed_domains=[],
        include_patterns=[],
        exclude_patterns=[],
        max_depth=3,
        settings={},
    )
    return SimpleNamespace(**{**base, **kw})


def test_scope_defaults_to_the_seeds_hosts_with_subdomains():
    scope = Scope.for_job(job())
    assert scope.allows("https://example.com/a")
    assert scope.allows("https://www.example.com/a")
    assert not scope.allows("https://example.org/a")
    assert not scope.allows("https://badexample.com/a")


def test_a_scope_of_many_domains_takes_their_subdomains_and_nothing_else():
    domains = [f"site{i}.example" for i in range(5000)] + ["127.1.0.7", "co.uk"]
    scope = Scope.for_job(job(allowed_domains=domains))
    assert scope.allows("https://a.b.site4999.example/x") and scope.allows("http://127.1.0.7/")
    assert scope.allows("http://shop.co.uk/") and not scope.allows("http://co.uk.evil.com/")
    assert not scope.allows("https://xsite1.example/") and not scope.allows("http://0.7/")
    assert not scope.allows("http://127.1.0.77/") and not scope.allows("https://example/")


def test_subdomains_can_be_left_out():
    scope = Scope.for_job(job(allowed_domains=["example.com"], include_subdomains=False))
    assert scope.allows("https://example.com/a")
    assert not scope.allows("https://www.example.com/a")


def test_scope_patterns_and_length():
    scope = Scope.for_job(job(include_patterns=[r"/docs/"], exclude_patterns=[r"\.pdf$"]))
    assert scope.allows("https://example.com/docs/a.html")
    assert not scope.allows("https://example.com/blog/a.html")
    assert not scope.allows("https://example.com/docs/a.pdf")
    assert not scope.allows("https://example.com/docs/" + "x" * 3000)


def test_links_to_the_page_itself_resolve_to_that_page_on_every_page_of_a_directory():
    """The link cache shares relative joins between the pages of one directory; an empty
    href or a fragment is the page itself, whichever page of the directory came first."""
    from tasks.content.links import JobCache, in_scope, new_links
    from web.models import CrawlJob

    cache = JobCache(Scope.for_job(CrawlJob(seeds=["http://s.test/"])), 1000)
    assert new_links(cache, "http://s.test/d/a", ["#x", "", "b#y", "?q#z"]) == [
        "http://s.test/d/a", "http://s.test/d/b", "http://s.test/d/a?q="]  # fmt: skip
    assert new_links(cache, "http://s.test/d/b?p=1", ["#x", "", "a#y", "?q"]) == [
        "http://s.test/d/b?p=1", "http://s.test/d/a", "http://s.test/d/b?q="]  # fmt: skip
    assert in_scope(cache, "http://s.test/d/c#frag") == "http://s.test/d/c"


def test_a_link_cache_shared_by_threads_forgets_its_oldest_half_without_error():
    """A worker's threads share its link caches: two that find one full at once both forget
    its oldest half (a KeyError there once failed a page, which was then fetched again)."""
    import sys
    import threading

    from tasks.content.links import BoundedSet

    cache, errors = BoundedSet(8), []

    def put_many(n: int) -> None:
        try:
            for i in range(20_000):
                cache.put((n, i))
        except Exception as exc:  # noqa: BLE001 - the race's error is what is counted
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=put_many, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and len(cache) <= 8


def test_the_threads_of_a_worker_that_meet_a_job_at_once_build_its_scope_once():
    """Each build reads the job's seeds (a broad crawl's 100,000 URLs: tens of megabytes a
    thread, left in that thread's own arena): the threads that meet a job together wait for
    one build and share it."""
    import threading
    import time

    from tasks.content import links

    reads = []

    class SlowJob(SimpleNamespace):
        @property
        def seeds(self):
            reads.append(threading.get_ident())
            time.sleep(0.05)  # a large seeds column, read and decoded
            return ["http://s.test/"]

    slow = SlowJob(pk=-7, allowed_domains=[], include_patterns=[], exclude_patterns=[],
                   max_depth=3, settings={})  # fmt: skip
    together, found = threading.Barrier(8), []

    def meet() -> None:
        together.wait()
        found.append(links.cache_for(slow))

    threads = [threading.Thread(target=meet) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(reads) == 1 and len({id(cache) for cache in found}) == 1
        assert found[0].scope.allows("http://s.test/a")
    finally:
        links._caches.pop(-7, None)
