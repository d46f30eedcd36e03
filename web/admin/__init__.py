"""The admin, one module per area: jobs (``jobs``), frontier URLs and pages (``frontier``), the
review queue of URLs a site kept blocking (``review``), live settings and release channels
(``operations``). Importing this package (Django's admin autodiscovery) registers them all.

Every active user may sign in (web/admin_site.py): staff see every job, everyone else works
on their own jobs and their URLs, pages and reviews only (web/access.py, ``ownership``)."""

from web.admin import frontier, jobs, operations, review

__all__ = ["frontier", "jobs", "operations", "review"]
