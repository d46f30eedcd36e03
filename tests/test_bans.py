"""Ban detection: what makes an answer a block page, and what does not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tasks.fetch import bans

JOB = SimpleNamespace(pk=11, settings={})
HOST = "shop.test"
PAGE = b"<html><title>Shoes</title><body>" + b"<p>Our catalogue of shoes.</p>" * 300 + b"</body>"


@pytest.fixture(autouse=True)
def usual_size(redis):
    bans._sizes.clear()
    bans._asked.clear()
    for _ in range(5):
        bans.learn_size(JOB.pk, HOST, len(PAGE))
    yield
    bans._sizes.clear()


@pytest.mark.parametrize(
    ("status", "url", "body", "why"),
    [
        (
            200,
            "/p/1",
            b'<div class="g-recaptcha" data-sitekey="x"></div>',
            "challenge: g-recaptcha",
        ),
        (200, "/p/1", b'<script src="https://hcaptcha.com/1/api.js">', "challenge: hcaptcha.com"),
        (503, "/p/1", b'<div class="cf-turnstile"></div>', "challenge: cf-turnstile"),
        (429, "/p/1", b"<h1>Please VERIFY you are HUMAN</h1>", "challenge: verify you are human"),
        (403, "/p/1", b"nope", "http_403"),
        (429, "/p/1", b"slow down", "http_429 without Retry-After"),  # refused, not told when
        (
            200,
            "/captcha?return=/p/1",
            b"<form>type the letters</form>",
            "redirected to a challenge",
        ),
        (200, "/p/1", b"<h1>Access denied</h1>", "block page ('access denied'"),
        # the vendors' block pages: Distil, PerimeterX, DataDome, Imperva
        (200, "/p/1", b"<h1>Pardon Our Interruption</h1><p>As you were browsing...</p>",
         "challenge: pardon our interruption"),
        (200, "/p/1", b"<h1>Access to this page has been denied.</h1><div id='px-captcha'>",
         "challenge: access to this page has been denied"),
        (403, "/p/1", b"<script src='https://ct.captcha-delivery.com/c.js'></script>",
         "challenge: captcha-delivery.com"),
        (200, "/p/1", b"<p>Request unsuccessful. Incapsula incident ID: 1-2</p>",
         "challenge: incapsula incident id"),
        (200, "/are-you-human?return=/p/1", b"<p>One moment</p>", "redirected to a challenge"),
        (200, "/p/1", b'{"error": "rate limited"}', "block page ('\"rate limited\"'"),
        (200, "/p/1", b"<p>Your access has been rate limited. Try again later.</p>",
         "block page ('been rate limited'"),
        (200, "/p/1", b"<h1>Hinweis</h1><p>Zugriff verweigert.</p>",
         "block page ('zugriff verweigert'"),
        (200, "/p/1", "<h1>Information</h1><p>Accès refusé.</p>".encode(),
         "block page ('accès refusé'"),
        (200, "/p/1", b"<p>You are making requests too quickly.</p>",
         "block page ('requests too quickly'"),
        (200, "/p/1", b"<html><body><noscript>Please enable JavaScript to view the page."
         b"</noscript></body></html>", "block page (a <noscript> notice and nothing else"),
        # a JavaScript challenge, whatever its status: a browser passes it
        (503, "/p/1", b"<html><head><title>Just a moment...</title><script>document.cookie="
         b"'jc=ok; path=/';setTimeout(function(){location.reload()}, 300);</script></head>"
         b"<body><p>One moment.</p></body></html>", "challenge: a page whose script sets"),
        (200, "/p/1", b"<script>document.cookie = 'v=1'; window.location.href = '/p/1';"
         b"</script>", "challenge: a page whose script sets"),
    ],
)  # fmt: skip
def test_block_pages_are_recognised(status, url, body, why):
    assert bans.detect(JOB, HOST, status, f"http://{HOST}{url}", body).startswith(why)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (200, PAGE),  # an ordinary page
        (200, b"<p>Robots and their history</p>" * 3000),  # words, but not a tiny page
        (503, b"maintenance"),
        (200, b"<p>Blocked drains? Call us.</p>"),  # tiny, but of a host whose size is unknown
        (200, b"<html><head><title>Rate limited</title></head><body></body></html>"),  # a name
        # a single-page application's shell: a notice, and the script that shows the rest
        (200, b"<html><body><div id=root></div><noscript>Enable JavaScript.</noscript>"
              b"<script src=/app.js></script></body></html>"),
        # a small page whose consent script sets a cookie, and an attribute named location
        (200, b"<div data-location='paris'>Paris</div><script>document.cookie='ok=1';</script>"),
        # a page of its own that sets a cookie by script, and says something
        (200, PAGE.replace(b"</body>", b"<script>document.cookie='seen=1';location.hash='#a';"
                                       b"</script></body>")),
    ],
)  # fmt: skip
def test_ordinary_answers_are_not_bans(status, body):
    host = HOST if b"drains" not in body else "other.test"
    assert bans.detect(JOB, host, status, f"http://{host}/p/1", body) == ""


def test_a_429_or_503_that_says_when_to_come_back_is_a_refusal_for_that_long():
    assert bans.detect(JOB, HOST, 429, f"http://{HOST}/p/1", b"slow down", retry_after=2.0) == (
        "http_429, Retry-After 2 s"
    )
    assert bans.detect(JOB, HOST, 503, f"http://{HOST}/p/1", b"busy", retry_after=9.0) == (
        "http_503, Retry-After 9 s"
    )
    assert bans.detect(JOB, HOST, 503, f"http://{HOST}/p/1", b"busy") == ""  # may be the page's


DENIED = (b"<html><head><title>Access denied</title></head><body><h1>Access denied</h1>"
          b"<p>Your requests look automated.</p></body></html>")  # fmt: skip
TEMPLATE = (b"<html><head><title>%s</title></head><body><nav>" + b"<a href='/x'>Menu item</a>" * 60
            + b"</nav><main>%s</main><footer>" + b"Copyright, terms, privacy. " * 20
            + b"</footer></body></html>")  # fmt: skip


@pytest.mark.parametrize(
    ("host", "body"),
    [
        ("new.test", DENIED),  # a host whose usual size nobody knows yet
        (HOST, DENIED),
        ("new.test", b"<html><body><h2>Sorry</h2><p>Request blocked.</p></body></html>"),
        ("new.test", TEMPLATE % (b"Access denied | Shop", b"<p>Too many requests.</p>")),
        ("new.test", TEMPLATE % (b"Shop", b"<h1>Request blocked</h1><p>Try later.</p>")),
    ],
)
def test_a_soft_block_is_told_from_content_whatever_this_process_has_learnt(host, body):
    assert bans.detect(JOB, host, 200, f"http://{host}/p/1", body).startswith("block page")


def test_a_page_that_speaks_of_blocks_among_much_else_is_content():
    article = TEMPLATE % (b"Plumbing", b"<p>Blocked drains? Request blocked pipes cleared.</p>")
    assert bans.detect(JOB, "new.test", 200, "http://new.test/p/1", article) == ""


def test_only_a_javascript_challenge_goes_to_a_browser():
    challenge = (b"<script>document.cookie='jc=ok';location.reload();</script>"
                 b"<p>Checking your browser</p>")  # fmt: skip
    assert bans.script_challenge(JOB, challenge)
    assert not bans.script_challenge(JOB, b'<div class="g-recaptcha"></div>')  # a person's
    assert not bans.script_challenge(JOB, PAGE)


def test_the_usual_size_one_process_learnt_is_known_to_the_others(redis):
    bans._sizes.clear()
    bans.learn_size(JOB.pk, "other.test", 90_000)
    bans._sizes.clear()  # another process: it has stored nothing of the host
    assert bans.usual_size(JOB.pk, "other.test") == pytest.approx(90_000)
    late = TEMPLATE % (b"Shop", b"<p>Access denied.</p>")  # much text: only its size tells
    assert bans.detect(JOB, "other.test", 200, "http://other.test/p/1", late).startswith("block")


def test_a_process_keeps_sizes_and_misses_of_a_bounded_number_of_hosts(redis, monkeypatch):
    monkeypatch.setattr(bans, "_HOSTS_MAX", 50)
    for i in range(200):  # hosts never stored (a broad crawl's dead ones), then stored ones
        bans.usual_size(JOB.pk, f"gone{i}.test")
        bans.learn_size(JOB.pk, f"live{i}.test", 1000 + i)
        assert len(bans._asked) <= 50 and len(bans._sizes) <= 50 and len(bans._learnt) <= 50
    bans._sizes.clear()  # forgotten here: the size shared through Redis is still known
    assert bans.usual_size(JOB.pk, "live3.test") == pytest.approx(1003)


def test_a_jobs_own_markers_extend_the_list():
    job = SimpleNamespace(pk=11, settings={"BAN_MARKERS": "please enable cookies,distil_r"})
    assert bans.detect(job, HOST, 200, f"http://{HOST}/", b"<b>Please enable cookies</b>") == (
        "challenge: please enable cookies"
    )


def test_markers_are_found_anywhere_in_the_scanned_head_and_the_first_one_is_named():
    filler = b"<p>Our catalogue of shoes, boots and sandals.</p>" * 4000  # ~200 KB
    late = filler + b'<div class="cf-turnstile"></div><script src="//hcaptcha.com/1">'
    assert bans.detect(JOB, HOST, 200, f"http://{HOST}/p/1", late) == "challenge: cf-turnstile"
    beyond = filler * 2 + b'<div class="g-recaptcha"></div>'  # past the first 256 KiB
    assert bans.detect(JOB, HOST, 200, f"http://{HOST}/p/1", beyond) == ""
    job = SimpleNamespace(pk=11, settings={"BAN_MARKERS": " , ,"})  # a list with no terms
    assert bans.detect(job, HOST, 200, f"http://{HOST}/p/1", late) == ""
