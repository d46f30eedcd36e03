"""What a body means: HTML parsing, URLs and the job's scope, sitemaps, extraction rules,
the body store."""
