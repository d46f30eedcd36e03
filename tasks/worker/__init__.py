"""The worker process: lifecycle, heartbeat, metrics, and the supervisor of worker processes."""
