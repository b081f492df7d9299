"""What runs inside training pods: progress reporting for msop to read.

Everything under ``msop.integrations`` imports only the Python standard library, so a
training image can ``pip install --no-deps msop`` and use it; framework glue (e.g.
:mod:`msop.integrations.mindspore`) imports its framework only when first used.
"""

from msop.integrations.progress import Reporter

__all__ = ["Reporter"]
