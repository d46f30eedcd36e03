"""A spider module that cannot be imported: a job naming any spider of it fails at start."""

from crawlplatform.spiders.nothing_here import Missing  # noqa: F401 (the point: ImportError)

from crawlplatform.spiders import Spider


class Broken(Spider):
    name = "broken"
