"""InformerFactory identity rules (no I/O)."""

from __future__ import annotations

import pytest

from msop.informers import InformerFactory, make_transform
from msop.kube import CONFIGMAPS, PODS, KubeClient


def factory() -> InformerFactory:
    return InformerFactory(KubeClient.__new__(KubeClient))


def test_same_scope_same_informer() -> None:
    f = factory()
    a = f.informer_for(PODS, "ns", label_selector="app=x")
    assert f.informer_for(PODS, "ns", label_selector="app=x") is a
    assert f.informer_for(PODS, "ns") is not a
    assert f.informer_for(PODS) is not f.informer_for(PODS, "ns")
    assert f.informer_for(CONFIGMAPS, "ns") is not f.informer_for(PODS, "ns")
    assert len(f.informers()) == 4


def test_conflicting_transform_is_refused() -> None:
    f = factory()
    f.informer_for(PODS)
    with pytest.raises(ValueError):
        f.informer_for(PODS, transform=make_transform(drop_last_applied=False))


def test_conflicting_compact_setting_is_refused() -> None:
    f = factory()
    a = f.informer_for(PODS, "ns", compact=True)
    assert a.compact and f.informer_for(PODS, "ns", compact=True) is a
    with pytest.raises(ValueError):
        f.informer_for(PODS, "ns")
    assert not f.informer_for(PODS).compact


def test_has_synced_requires_all() -> None:
    f = factory()
    a = f.informer_for(PODS)
    b = f.informer_for(CONFIGMAPS)
    a.replace([], "1")
    assert not f.has_synced()
    b.replace([], "1")
    assert f.has_synced()
