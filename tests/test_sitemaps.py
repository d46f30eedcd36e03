import gzip

from tasks.content.sitemaps import looks_like_sitemap, parse_sitemap

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc> http://h/a </loc></url><url><loc>http://h/b</loc><lastmod>2026-01-01</lastmod></url>
</urlset>"""


def test_urlset_index_and_gzip():
    assert parse_sitemap(URLSET, 1 << 20) == ["http://h/a", "http://h/b"]
    index = (
        b'<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><sitemap>'
        b"<loc>http://h/s1.xml.gz</loc></sitemap></sitemapindex>"
    )
    assert parse_sitemap(index, 1 << 20) == ["http://h/s1.xml.gz"]
    assert parse_sitemap(gzip.compress(URLSET), 1 << 20) == ["http://h/a", "http://h/b"]


def test_entities_are_not_expanded():
    laughs = b"""<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">
    <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
    <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
    <!ENTITY xxe SYSTEM "file:///etc/passwd">]>
    <urlset><url><loc>http://h/&lol3;</loc></url><url><loc>&xxe;</loc></url></urlset>"""
    locs = parse_sitemap(laughs, 1 << 20)
    assert all("lollol" not in u and "root:" not in u for u in locs)


def test_gzip_bomb_is_capped_and_garbage_is_empty():
    bomb = gzip.compress(b"<urlset>" + b" " * (50 << 20) + b"</urlset>")
    assert parse_sitemap(bomb, 1 << 20) == []
    assert parse_sitemap(b"not xml at all", 1 << 20) == []
    assert parse_sitemap(b"<html><loc>http://h/x</loc></html>", 1 << 20) == []


def test_sitemap_detection():
    assert looks_like_sitemap("http://h/sitemap.xml", "text/html")
    assert looks_like_sitemap("http://h/s.xml.gz", "application/octet-stream")
    assert not looks_like_sitemap("http://h/page", "text/html")


def test_the_locs_are_those_a_sitemap_spider_follows():
    body = b"""<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"
      xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
      <url><loc>http://h/p</loc><image:image><image:loc>http://h/p.png</image:loc></image:image>
      </url><url><loc></loc></url><url><lastmod>2026-01-01</lastmod></url>
      <url><loc>http://h/q</loc></url></urlset>"""
    assert parse_sitemap(body, 1 << 20) == ["http://h/p", "http://h/q"]
