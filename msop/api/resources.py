"""The MSJob REST resource, for clients of the API server (operator and SDK alike)."""

from __future__ import annotations

from msop.api import constants as c
from msop.kube.resources import Resource

MSJOBS = Resource(c.GROUP, c.VERSION, c.PLURAL, c.KIND)

__all__ = ["MSJOBS"]
