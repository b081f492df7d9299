"""The scheduling systems msop integrates with, in the order they decide: Kueue, then
Volcano (a job queued by Kueue and placed as a gang by Volcano waits for Kueue first).

The operator (``setup.py``) starts the enabled ones, each with the caches it asks for;
``msop render`` plans a job with what each would see of it. Both go through the seam
(:mod:`.scheduling`) and name no system: this list is the one place that does.
"""

from __future__ import annotations

from msop.msjob import gang, kueue
from msop.msjob.scheduling import Integration


def enabled(*, kueue_enabled: bool, gang_scheduling: bool) -> list[Integration]:
    """The systems switched on (``--enable-kueue``, ``--enable-gang-scheduling``), in the
    order they decide."""
    switched = ((kueue.INTEGRATION, kueue_enabled), (gang.INTEGRATION, gang_scheduling))
    return [integration for integration, on in switched if on]
