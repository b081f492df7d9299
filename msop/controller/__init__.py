"""msop.controller: the generic controller runtime (controller-runtime's ideas, on asyncio).

One concept per module: :mod:`.workqueue` (+ :mod:`.ratelimiter`, :mod:`.clock`),
:mod:`.reconcile` (Request/Result/Reconciler), :mod:`.handler`
(event -> key), :mod:`.controller` (workers), :mod:`.leaderelection`, :mod:`.events`,
:mod:`.expectations`, :mod:`.health` (HTTP endpoints; :mod:`.servingcert` and
:mod:`.selfsigned` for TLS, :mod:`.delegatedauth` for the API server's say on who may
read them), :mod:`.manager` and :mod:`.metrics`. Nothing here knows any particular kind;
``msop.msjob`` is one user of this package.
"""

from msop.controller import metrics
from msop.controller.clock import Clock, FakeClock, MonotonicClock
from msop.controller.controller import DEFAULT_EXPECTED_ERRORS, Controller, EventSource
from msop.controller.delegatedauth import AuthOptions
from msop.controller.events import EventRecorder
from msop.controller.expectations import Expectations
from msop.controller.handler import (
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
    EventHandler,
)
from msop.controller.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
)
from msop.controller.manager import Manager, Runnable, SecureServing
from msop.controller.ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)
from msop.controller.reconcile import Reconciler, Request, Result, TerminalError
from msop.controller.workqueue import (
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    QueueStatistics,
    ShutDown,
    WorkQueue,
)

__all__ = [
    "DEFAULT_EXPECTED_ERRORS",
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "AuthOptions",
    "BucketRateLimiter",
    "Clock",
    "Controller",
    "EnqueueRequestForObject",
    "EnqueueRequestForOwner",
    "EnqueueRequestsFromMapFunc",
    "EventHandler",
    "EventRecorder",
    "EventSource",
    "Expectations",
    "FakeClock",
    "ItemExponentialFailureRateLimiter",
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "LeaderElector",
    "Manager",
    "MaxOfRateLimiter",
    "MonotonicClock",
    "QueueStatistics",
    "RateLimiter",
    "Reconciler",
    "Request",
    "Result",
    "Runnable",
    "SecureServing",
    "ShutDown",
    "TerminalError",
    "WorkQueue",
    "default_controller_rate_limiter",
    "metrics",
]
