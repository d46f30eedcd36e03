"""TLS trust of the fetcher against a local HTTPS site signed by a CA made in the test: the
operator's CA_BUNDLE (file, directory, alone), the environment's bundles, client certificates,
and failures that name the setting to use."""

from __future__ import annotations

import pytest

from tasks import defaults
from tasks.fetch import fetching, outcomes
from tasks.rules import guard
from tests.budgets import LOCAL
from tests.conftest import crawl_to_end
from tests.tlssite import Authority, TLSSite
from web.models import FrontierURL, Page

LIMITS = fetching.FetchLimits(2, 2, 4, 1 << 20, 3)
TRUST_SETTINGS = ("CRAWL_CA_BUNDLE", "CRAWL_CA_BUNDLE_ONLY", "CRAWL_CLIENT_CERT",
                  "CRAWL_CLIENT_KEY", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")  # fmt: skip


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """No trust setting but those a test makes (a machine may set REQUESTS_CA_BUNDLE)."""
    for name in TRUST_SETTINGS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def authority(tmp_path_factory) -> Authority:
    return Authority(tmp_path_factory.mktemp("pki") / "internal")


@pytest.fixture(scope="module")
def intranet(authority):
    with TLSSite(authority) as site:
        yield site


@pytest.fixture(scope="module")
def mutual(authority):
    with TLSSite(authority, ask_client=True) as site:
        yield site


def get(url: str) -> fetching.Response:
    return fetching.fetch(url, user_agent="t", limits=LIMITS, allow=guard.networks("127.0.0.0/8"))


def test_a_site_signed_by_a_private_ca_fails_naming_the_setting_that_trusts_it(intranet):
    with pytest.raises(outcomes.TLSError) as failed:
        get(intranet.url())
    assert str(failed.value) == (
        "certificate verify failed: unable to get local issuer certificate "
        "(set CA_BUNDLE to trust a private CA)"
    )


@pytest.mark.parametrize("form", ["file", "directory"])
def test_ca_bundle_is_trusted_besides_the_default_trust(monkeypatch, authority, intranet, form):
    where = authority.ca if form == "file" else authority.directory  # the directory holds keys too
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(where))
    resp = get(intranet.url())
    assert (resp.status, b"Intranet" in resp.body) == (200, True)
    from tasks.fetch import trust

    assert len(trust.context().get_ca_certs()) > 100  # certifi's authorities are still trusted


def test_ca_bundle_only_is_the_whole_trust(monkeypatch, authority, intranet):
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    monkeypatch.setenv("CRAWL_CA_BUNDLE_ONLY", "true")
    assert get(intranet.url()).status == 200
    from tasks.fetch import trust

    assert [c["subject"] for c in trust.context().get_ca_certs()] == [
        ((("commonName", "Test Internal CA"),),)
    ]


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_the_environments_bundle_is_honoured(monkeypatch, authority, intranet, variable):
    monkeypatch.setenv(variable, str(authority.ca))
    assert get(intranet.url()).status == 200


def test_a_live_ca_bundle_is_in_force_without_a_restart(monkeypatch, authority, intranet):
    monkeypatch.setattr(defaults, "live", {"CA_BUNDLE": str(authority.ca)})
    assert get(intranet.url()).status == 200


def test_a_server_asking_for_a_client_certificate_gets_client_cert(
    monkeypatch, authority, mutual, tmp_path
):
    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    with pytest.raises(outcomes.TLSError) as failed:
        get(mutual.url())
    assert "(set CLIENT_CERT and CLIENT_KEY)" in str(failed.value)
    monkeypatch.setenv("CRAWL_CLIENT_CERT", str(authority.client))
    monkeypatch.setenv("CRAWL_CLIENT_KEY", str(authority.client.with_suffix(".key")))
    assert get(mutual.url()).status == 200
    both = tmp_path / "client-and-key.pem"  # one file with the certificate and its key
    both.write_bytes(
        authority.client.read_bytes() + authority.client.with_suffix(".key").read_bytes()
    )
    monkeypatch.setenv("CRAWL_CLIENT_CERT", str(both))
    monkeypatch.delenv("CRAWL_CLIENT_KEY")
    assert get(mutual.url()).status == 200


@pytest.mark.parametrize(
    "env,named",
    [
        ({"CRAWL_CA_BUNDLE": "/nowhere/ca.pem"}, "CA_BUNDLE=/nowhere/ca.pem: no such file"),
        ({"CRAWL_CLIENT_CERT": "/nowhere/c.pem"}, "CLIENT_CERT=/nowhere/c.pem: not a usable"),
        ({"CRAWL_CLIENT_KEY": "/nowhere/c.key"}, "CLIENT_KEY=/nowhere/c.key is set without"),
    ],
)
def test_unusable_tls_settings_are_an_outcome_that_names_them(monkeypatch, intranet, env, named):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(outcomes.InternalError, match="TLS settings: " + named):
        get(intranet.url())
    from tests.hostile import HostileSite

    with HostileSite() as plain:
        assert get(plain.url("/")).status == 200  # a request without TLS is not refused


@pytest.mark.django_db(transaction=True)
def test_an_https_intranet_is_crawled_with_ca_bundle_and_fails_readably_without(
    redis, tmp_path, authority, intranet
):
    job, _ = crawl_to_end(intranet.url(), tmp_path, LOCAL, max_depth=0)
    row = FrontierURL.objects.get(job=job)
    assert (row.state, row.error_reason) == ("failed", "tls")
    assert "(set CA_BUNDLE to trust a private CA)" in row.error_message
    job, _ = crawl_to_end(intranet.url(), tmp_path, {**LOCAL, "CRAWL_CA_BUNDLE": str(authority.ca)},
                          max_depth=0)  # fmt: skip
    assert FrontierURL.objects.get(job=job).state == "done"
    assert Page.objects.filter(job=job, status=200).count() == 1


def test_the_trust_holds_through_a_jobs_socks_proxy(monkeypatch, authority, intranet):
    from tests.antibot import ForwardProxy

    monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
    with ForwardProxy("127.0.0.2", "socks5") as proxy:
        visitor = fetching.Visitor(proxy=proxy.url())
        resp = fetching.fetch(intranet.url(), user_agent="t", limits=LIMITS,
                              allow=guard.networks("127.0.0.0/8"), visitor=visitor)  # fmt: skip
        assert resp.status == 200 and proxy.targets == ["127.0.0.1"]


def test_an_https_proxys_own_certificate_is_checked_with_the_same_trust(
    monkeypatch, authority, intranet
):
    import ssl

    from tests.antibot import ForwardProxy
    from tests.hostile import HostileSite

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(authority.server, authority.server.with_suffix(".key"))
    with HostileSite() as plain, ForwardProxy("127.0.0.2", tls=tls) as proxy:
        visitor = fetching.Visitor(proxy=proxy.url())

        def get_through(url: str) -> fetching.Response:
            return fetching.fetch(url, user_agent="t", limits=LIMITS,
                                  allow=guard.networks("127.0.0.0/8"), visitor=visitor)  # fmt: skip

        with pytest.raises(outcomes.ProxyFailed, match=r"\(set CA_BUNDLE to trust a private CA\)"):
            get_through(plain.url("/"))
        monkeypatch.setenv("CRAWL_CA_BUNDLE", str(authority.ca))
        assert get_through(plain.url("/")).status == 200  # forwarded, over TLS to the proxy
        assert get_through(intranet.url()).status == 200  # tunnelled, TLS inside TLS
    assert proxy.targets == ["127.0.0.1", "127.0.0.1"]


@pytest.mark.django_db
def test_a_job_skips_certificate_checks_only_while_its_owner_holds_the_permission(intranet):
    from django.contrib.auth.models import Permission, User

    from tasks.fetch import trust
    from tasks.frontier import jobs
    from web.models import CrawlJob

    owner = User.objects.create_user("owner")  # an active user, not staff
    unchecked = {"TLS_VERIFY": False}
    refused = CrawlJob(seeds=["https://127.0.0.1/"], owner=owner, settings=unchecked)
    assert "TLS_VERIFY: needs the web.skip_tls_verify permission" in refused.problems()["settings"]
    job = jobs.create_job([intranet.url()], owner=owner)
    CrawlJob.objects.filter(pk=job.pk).update(settings=unchecked)  # stored past the check
    job = CrawlJob.objects.get(pk=job.pk)
    assert trust.verifies(job) and fetching.limits_for(job).verify
    owner.user_permissions.add(Permission.objects.get(codename="skip_tls_verify"))
    job = CrawlJob.objects.get(pk=job.pk)
    job.owner = User.objects.get(pk=owner.pk)  # permissions are cached per instance
    assert not job.problems(seeds=False)
    limits = fetching.limits_for(job)
    assert not limits.verify
    resp = fetching.fetch(intranet.url(), user_agent="t", limits=limits,
                          allow=guard.networks("127.0.0.0/8"))  # fmt: skip
    assert resp.status == 200  # no CA_BUNDLE: the certificate was not checked
    assert trust.verifies() and trust.verifies(CrawlJob(seeds=[], settings={}))  # the default


@pytest.mark.django_db
def test_a_job_that_skips_certificate_checks_keeps_its_robots_txt_to_itself(
    redis, monkeypatch, intranet
):
    from tasks.fetch import robots
    from tasks.frontier import jobs

    monkeypatch.setenv("CRAWL_ALLOWED_NETWORKS", "127.0.0.0/8")
    robots.forget()
    strict = jobs.create_job([intranet.url()])  # made by an operator: may set anything
    lax = jobs.create_job([intranet.url()], settings={"TLS_VERIFY": False})
    assert robots.check(strict, intranet.url("/"), "t").failure.reason == "tls"
    assert robots.check(lax, intranet.url("/"), "t").allowed  # not the strict job's failure
    robots.forget()
