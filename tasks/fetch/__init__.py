"""How a request leaves and what came back: the fetch, robots.txt, politeness, outcomes."""
