"""A spider job's FEEDS (tasks/content/feeds.py), on the real database: the operator's and a
spider's, written when the run finishes by the process that ends it, refused at the start
when they cannot be written, reported (and written again by export) when a write fails."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from scrapy import exporters as scrapys

from tasks.content import exporters, spiders
from tasks.frontier import jobs
from tasks.frontier.scheduler import finish_if_done
from tests.s3server import S3Server
from tests.site import Site
from tests.test_spiders import run_job
from web.models import CrawlJob, Item, JobState

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def installed(monkeypatch, redis, fast):
    monkeypatch.setenv("CRAWL_SPIDER_MODULES", "tests.spiders,tests.feedspiders")
    spiders._classes.clear()
    yield
    spiders._classes.clear()
    spiders._instances.clear()


def finished_job(spider: str, seed: str, **args: str) -> CrawlJob:
    job = jobs.create_job([], spider=spider, spider_args={"seed": seed, **args})
    jobs.start(job)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, job.error
    run_job(job)
    assert finish_if_done(job)
    job.refresh_from_db()
    return job


def titles(job: CrawlJob) -> list[dict]:
    """The job's items as the spider yielded them, in the order they were stored."""
    rows = Item.objects.filter(job=job).order_by("id").values_list("data", "fields")
    return [exporters.Stored.of(data, fields).data for data, fields in rows]


def test_feeds_the_platform_cannot_write_fail_the_job_at_start_saying_why(installed):
    job = jobs.create_job([], spider="bad_feeds")
    jobs.start(job)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    for why in [
        "FEED_URI_PARAMS: a function of URI parameters is code the platform does not run",
        "FEEDS ftp://ftp.example/items.json: ftp:// feeds are not written: use a path or an "
        "s3:// URI",
        "FEEDS stdout:: the platform's feeds are written by the process that ends the job",
        "FEEDS items.pickle: format 'pickle' is not one the platform writes",
        "FEEDS items: the format is not set and the URI has no extension",
        "FEEDS batches.jsonl: with batch_item_count, the URI must name %(batch_time)s or "
        "%(batch_id)d",
        "FEEDS filtered.jsonl: item_filter: items are written from the item table",
        "postprocessing 'myproject.plugins.Upper': the platform applies Scrapy's own plugins",
        "FEEDS odd.csv: LookupError: unknown encoding: no-such-codec",
        "FEEDS kwargs.json: TypeError",
    ]:
        assert why in job.error, why
    assert "user:pass" not in job.error  # a URI's credentials are not shown


def test_a_spider_argument_may_not_choose_the_directory_of_a_feed(installed, monkeypatch,
                                                                  tmp_path):  # fmt: skip
    monkeypatch.setenv("CRAWL_FEEDS", json.dumps({f"{tmp_path}/%(name)s/%(part)s.jsonl": {}}))
    for part, why in [("../../etc", "the spider's 'part' is '../../etc', which would choose "
                                    "another directory"),
                      ("..", "which would choose another directory")]:  # fmt: skip
        job = jobs.create_job([], spider="pages", spider_args={"seed": "http://127.0.0.1:9/",
                                                               "part": part})  # fmt: skip
        jobs.start(job)
        job.refresh_from_db()
        assert job.state == JobState.FAILED and why in job.error, job.error
    job = jobs.create_job([], spider="pages", spider_args={"seed": "http://127.0.0.1:9/"})
    jobs.start(job)
    job.refresh_from_db()
    assert "%(part)s: the spider has no attribute 'part'" in job.error


def test_the_operators_feeds_are_written_when_the_run_finishes(installed, monkeypatch, tmp_path):
    out = tmp_path / "out"
    monkeypatch.setenv("CRAWL_FEEDS", json.dumps({
        f"{out}/%(name)s.json": {"format": "json"},
        f"{out}/%(name)s.xml": {"format": "xml", "fields": ["title"]},
        f"file://{out}/%(time)s.csv": {},
    }))  # fmt: skip
    monkeypatch.setenv("CRAWL_FEED_EXPORT_INDENT", "2")
    monkeypatch.setenv("CRAWL_FEED_EXPORT_FIELDS", "url,title")
    with Site(pages=12) as site:
        job = finished_job("pages", site.url("/p/0"))
    items = titles(job)
    assert len(items) == job.stats["items"] > 12  # a page with a query is two URLs
    json_feed = (out / "pages.json").read_bytes()
    assert json_feed == scrapy_bytes("JsonItemExporter", items, indent=2,
                                     fields_to_export=["url", "title"])  # fmt: skip
    assert (out / "pages.xml").read_bytes() == scrapy_bytes("XmlItemExporter", items, indent=2,
                                                            fields_to_export=["title"])  # fmt: skip
    (csv_feed,) = out.glob("*.csv")
    assert csv_feed.name == job.started_at.strftime("%Y-%m-%dT%H-%M-%S+00-00.csv")
    assert csv_feed.read_bytes() == scrapy_bytes("CsvItemExporter", items,
                                                 fields_to_export=["url", "title"])  # fmt: skip
    assert [(f["format"], f["items"]) for f in job.stats["feeds"]] == [
        ("json", len(items)), ("xml", len(items)), ("csv", len(items))]
    assert "error" not in json.dumps(job.stats["feeds"])


def scrapy_bytes(exporter: str, items: list[dict], **options) -> bytes:
    """What Scrapy 2.19's exporter writes for ``items`` in a feed (``FEED_EXPORT_INDENT``
    0 unless ``options`` say otherwise)."""
    out = io.BytesIO()
    writer = getattr(scrapys, exporter)(out, **{"indent": 0, **options})
    writer.start_exporting()
    for item in items:
        writer.export_item(item)
    writer.finish_exporting()
    return out.getvalue()


def test_a_spiders_feeds_replace_the_operators_and_come_in_batches(installed, monkeypatch,
                                                                   tmp_path):  # fmt: skip
    monkeypatch.setenv("CRAWL_FEEDS", json.dumps({f"{tmp_path}/operator.jsonl": {}}))
    monkeypatch.chdir(tmp_path)  # the spider's paths are relative: to the writing process's
    with Site(pages=12) as site:
        job = finished_job("own_feeds", site.url("/p/0"))
    items = titles(job)
    assert not (tmp_path / "operator.jsonl").exists()
    assert (tmp_path / "own/own_feeds.csv").read_bytes() == scrapy_bytes(
        "CsvItemExporter", items, fields_to_export=["url", "title"], encoding="utf-8")
    batches = [(tmp_path / f"own/own_feeds-{n}.jsonl").read_bytes() for n in (1, 2, 3)]
    assert b"".join(batches) == scrapy_bytes("JsonLinesItemExporter", items, encoding="utf-8")
    assert [len(b.splitlines()) for b in batches] == [5, 5, len(items) - 10]
    assert not (tmp_path / "own/own_feeds-4.jsonl").exists()


def test_an_empty_run_writes_its_feeds_unless_store_empty_is_off(installed, monkeypatch,
                                                                  tmp_path):  # fmt: skip
    monkeypatch.setenv("CRAWL_FEEDS", json.dumps({f"{tmp_path}/kept.json": {},
                                                  f"{tmp_path}/not.csv": {"store_empty": False}}))
    job = finished_job("pages", "http://127.0.0.1:9/")  # refused: no page, no item
    empty = scrapy_bytes("JsonItemExporter", [])
    assert (tmp_path / "kept.json").read_bytes() == empty == b"[\n\n]"
    assert not (tmp_path / "not.csv").exists()
    assert job.stats["feeds"] == [{"uri": f"{tmp_path}/kept.json", "format": "json", "items": 0}]


def test_a_feed_that_cannot_be_written_is_reported_and_export_writes_it_again(
    installed, monkeypatch, tmp_path
):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with S3Server() as s3:
        monkeypatch.setenv("CRAWL_FEEDS", json.dumps({
            f"{blocked}/items.jsonl": {},
            "s3://later/%(name)s.jsonl": {},
        }))  # fmt: skip
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        with Site(pages=5) as site:
            job = finished_job("pages", site.url("/p/0"))  # the scheduler's move: no raise
        assert job.state == JobState.FINISHED and job.stats["items"] > 5
        by_format = {f["uri"]: f for f in job.stats["feeds"]}
        assert by_format[f"{blocked}/items.jsonl"]["error"].startswith(("NotADirectoryError",
                                                                         "FileExistsError"))
        assert "NoSuchBucket" in by_format["s3://later/pages.jsonl"]["error"]
        assert Item.objects.filter(job=job).count() == job.stats["items"]  # the items stay
        s3.client.create_bucket(Bucket="later")
        with pytest.raises(CommandError, match="some feeds could not be written"):
            call_command("export", str(job.pk), "--feeds")
        written = s3.get("later", "pages.jsonl")
    assert written == scrapy_bytes("JsonLinesItemExporter", titles(job))


def test_export_items_writes_scrapys_bytes_to_a_file_s3_and_standard_output(
    installed, worker_env, tmp_path
):
    with Site(pages=6) as site:
        job = finished_job("pages", site.url("/p/0"))
    items = titles(job)
    expected = scrapy_bytes("XmlItemExporter", items)
    call_command("export", str(job.pk), "--items", "-o", str(tmp_path / "items.xml"))
    assert (tmp_path / "items.xml").read_bytes() == expected
    call_command("export", str(job.pk), "--items", "-o", str(tmp_path / "%(name)s.csv.gz"))
    import gzip

    assert gzip.decompress((tmp_path / "pages.csv.gz").read_bytes()) == scrapy_bytes(
        "CsvItemExporter", items)
    with S3Server("exports") as s3:
        env = {**worker_env, "AWS_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": "test",
               "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
               "CRAWL_SPIDER_MODULES": "tests.spiders"}  # fmt: skip
        for args in (["-o", "s3://exports/items.json"], ["-o", "-", "--format", "json"]):
            done = subprocess.run([sys.executable, "manage.py", "export", str(job.pk), "--items",
                                   *args], cwd=settings.BASE_DIR, env=env, capture_output=True,
                                  timeout=120)  # fmt: skip
            assert done.returncode == 0, done.stderr
        assert s3.get("exports", "items.json") == scrapy_bytes("JsonItemExporter", items)
    assert done.stdout == scrapy_bytes("JsonItemExporter", items)
    with pytest.raises(CommandError, match="items are written as json, jsonlines"):
        call_command("export", str(job.pk), "--items", "-o", "-", "--format", "warc")


def test_stored_items_give_back_the_key_order_postgresql_does_not_keep(installed):
    """jsonb orders an object's keys by length: the row's fields put the spider's back."""
    from tasks.content import items as itempipes

    job = jobs.create_job([], spider="pages", spider_args={"seed": "http://127.0.0.1:9/"})
    item = {"title": "T", "url": "u", "seller": {"name": "n", "city": "c", "zz": [{"b": 1,
                                                                                  "a": 2}]}}
    data, _, fields = itempipes.Pipelines(spiders.create(job)).keep(item)
    row = Item.objects.create(job=job, spider="pages", data=data, fields=fields)
    row.refresh_from_db()
    back = exporters.Stored.of(row.data, row.fields)
    assert json.dumps(back.data) == json.dumps(item)
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        assert json.dumps(row.data) != json.dumps(item)  # what the fields are for


def test_a_fields_serializer_makes_what_is_kept_and_written_as_scrapys_exporters(installed):
    """The ``Product`` of Scrapy's items docs: a field's ``serializer`` made the value each
    exporter writes (an ``Item``'s ``Field``, a dataclass field's ``metadata``)."""
    import dataclasses

    import scrapy

    from crawlplatform.spiders import Field
    from crawlplatform.spiders import Item as OurItem
    from tasks.content import items as itempipes

    def upper(names):
        return {"name": names["name"].upper()}

    class Product(OurItem):
        name, price = Field(), Field(serializer=str)
        last_updated, spec = Field(serializer=str), Field(serializer=upper)

    class ScrapysProduct(scrapy.Item):
        name, price = scrapy.Field(), scrapy.Field(serializer=str)
        last_updated, spec = scrapy.Field(serializer=str), scrapy.Field(serializer=upper)

    @dataclasses.dataclass
    class Discount:
        percent: int = dataclasses.field(metadata={"serializer": str})

    values = {"name": "Desk", "price": 10, "last_updated": ["today"], "spec": {"name": "oak"}}
    job = jobs.create_job([], spider="pages", spider_args={"seed": "http://127.0.0.1:9/"})
    pipes = itempipes.Pipelines(spiders.create(job))
    assert pipes.keep(Product(values))[0] == json.loads(
        scrapy_bytes("JsonLinesItemExporter", [ScrapysProduct(values)]))
    assert pipes.keep(Product(values))[0]["last_updated"] == "['today']"
    assert pipes.keep(Discount(10))[0] == {"percent": "10"}
