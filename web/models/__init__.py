"""The models, the source of truth of every crawl: jobs (``jobs``), their frontier URLs, pages,
checkpoints and reviews (``frontier``), and the platform's operational state (``operations``).

Every model, state and constant the rest of the code uses is imported here, as Django expects
of an app's models, so that ``from web.models import ...`` names them all.
"""

from web.models.frontier import (
    NOT_MODIFIED,
    PENDING_STATES,
    PENDING_STATES_SQL,
    Checkpoint,
    FrontierURL,
    Item,
    Page,
    Review,
    Stat,
    StatKind,
    URLState,
    pending_only,
)
from web.models.jobs import TERMINAL_STATES, CrawlJob, JobState
from web.models.operations import (
    Channel,
    ChannelEvent,
    HealthProbe,
    LiveSetting,
    SchedulerFence,
    SettingChange,
)

__all__ = [
    "NOT_MODIFIED",
    "PENDING_STATES",
    "PENDING_STATES_SQL",
    "TERMINAL_STATES",
    "Channel",
    "ChannelEvent",
    "Checkpoint",
    "CrawlJob",
    "FrontierURL",
    "HealthProbe",
    "Item",
    "JobState",
    "LiveSetting",
    "Page",
    "Review",
    "SchedulerFence",
    "SettingChange",
    "Stat",
    "StatKind",
    "URLState",
    "pending_only",
]
