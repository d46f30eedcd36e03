"""URL and job state: the transitions, seeding, job lifecycle and checkpoints, the scheduler."""
