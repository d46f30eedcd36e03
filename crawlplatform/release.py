"""The release: images are tagged with it (``crawlplatform:1.0.0``), and workers report it as
their version unless ``CRAWL_VERSION`` says otherwise."""

VERSION = "1.0.0"
