"""Pure rules: the checks a job's fields must pass (URLs and scope, networks, selectors,
schedules, channel names). They import neither ``web`` nor the engine, so the models validate
with them and every layer above can use them."""
