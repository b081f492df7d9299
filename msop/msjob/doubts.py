"""A job's writes in doubt, and the Events that announce them once they prove stored.

A create or a status write that got no answer (connection lost, timeout, the pass
cancelled while it was out) or a 5xx may have been carried out (``in_doubt``). Its Events
are not emitted then (a write that failed must not be announced) but held in the job's
``Doubts``, which the reconciler keeps with the rest of what it remembers about the job:

- a pod or Service in doubt is announced (``SuccessfulCreatePod``) once the cache shows
  it (``settle``) or a create of it is answered AlreadyExists (``refused``, then
  ``created``); one that a later create makes is announced with that pass's creates;
- a status in doubt is judged once the cache holds a newer job than the one it was
  written over: if the stored conditions then hold its conditions' states (type, status,
  reason), it is announced with the Events of its pass (``MSJobRunning`` ...), and it is
  forgotten either way (if it was not stored, that pass plans it again); a later write
  that succeeds over the same version takes its place (``status_written``).

``unannounced`` counts the Events held, for the log line of a process that stops with
writes in doubt. This module also words the ``SuccessfulCreate<kind>`` Events
(``created_messages``): one per pass names every object it created.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field

from msop.controller.events import Recorder
from msop.kube.errors import ApiError, ApiUnavailable, is_already_exists
from msop.kube.objects import JSON
from msop.msjob.passes import Event

#: Longest Event message written (the API server's limit for event notes is 1 KiB).
EVENT_MESSAGE_LIMIT = 1024


def created_messages(kind: str, names: Sequence[str]) -> list[str]:
    """``Created pod: a`` for one object, ``Created pods: a, b, c`` for several; split
    into as many messages as ``EVENT_MESSAGE_LIMIT`` needs (no name is ever cut)."""
    messages: list[str] = []
    batch: list[str] = []
    size = 0
    for name in names:
        if batch and size + 2 + len(name) > EVENT_MESSAGE_LIMIT - len(kind) - 16:
            messages.append(_created(kind, batch))
            batch, size = [], 0
        batch.append(name)
        size += 2 + len(name)
    if batch:
        messages.append(_created(kind, batch))
    return messages


def _created(kind: str, names: list[str]) -> str:
    noun = kind.lower() if len(names) == 1 else f"{kind.lower()}s"
    return f"Created {noun}: {', '.join(names)}"


def in_doubt(e: ApiError) -> bool:
    """The refused write may have been carried out all the same: no answer came, or a
    server error (the API server may have stored it and failed after)."""
    return isinstance(e, ApiUnavailable) or e.status >= 500


def _condition_states(status: JSON) -> set[tuple[str, str, str]]:
    """A status's conditions without their times: a write in doubt retried in a later
    pass carries new timestamps for the same transitions."""
    return {
        (str(x.get("type")), str(x.get("status")), str(x.get("reason")))
        for x in status.get("conditions") or []
    }


@dataclass(slots=True)
class Doubts:
    """One job's writes whose outcome is not known, with what announces them."""

    creates: dict[str, set[str]] = field(default_factory=dict)
    """Kind -> names of children created without an answer."""
    status: JSON | None = None
    """A status written without an answer."""
    base: str | None = None
    """The job's resourceVersion that status was written over: while the cache still
    shows it, the cache cannot tell whether the write was stored."""
    events: list[Event] = field(default_factory=list)
    """The Events of the pass that wrote ``status``."""

    def held(self) -> bool:
        """Whether any write is still in doubt (else there is nothing to keep)."""
        return self.status is not None or any(self.creates.values())

    def unannounced(self) -> int:
        """Events held back: one per kind of child created without an answer, and those
        of the status written without one."""
        return sum(1 for names in self.creates.values() if names) + (
            len(self.events) if self.status is not None else 0
        )

    def sending(self, kind: str, names: Iterable[str]) -> set[str]:
        """Creates of ``names`` go out: in doubt until answered (a pass cancelled
        meanwhile leaves them so). Returns those already in doubt before, from an earlier
        create that got no answer."""
        doubts = self.creates.setdefault(kind, set())
        names = set(names)
        before = doubts & names
        doubts.update(names)
        return before

    def refused(self, kind: str, name: str, e: ApiError, earlier: Container[str]) -> bool:
        """The create of ``name`` was refused with ``e``; ``earlier``: the names in doubt
        before it was sent (``sending``). True if the refusal proves the earlier create
        stored it (AlreadyExists): announce it (``created``). A refusal that proves it not
        stored forgets it; one that may have stored it keeps it in doubt."""
        if is_already_exists(e):
            if name in earlier:
                return True  # our create in doubt had stored it
            self.creates[kind].discard(name)
        elif not in_doubt(e) and name not in earlier:
            self.creates[kind].discard(name)  # refused: not stored
        return False

    def created(
        self,
        recorder: Recorder,
        job: JSON,
        kind: str,
        names: Sequence[str],
        found: Iterable[str],
    ) -> None:
        """A pass's creates answered: one event names every object it created (not one
        event per object), another the objects in doubt it ``found`` stored."""
        self.creates.get(kind, set()).difference_update(names)
        for message in created_messages(kind, names):
            recorder.event(job, "Normal", f"SuccessfulCreate{kind}", message, deferrable=True)
        self._announce_created(recorder, job, kind, set(found))

    def status_failed(
        self, e: BaseException, status: JSON, events: Sequence[Event], base: str | None
    ) -> None:
        """A write of ``status`` over the job at ``base`` failed with ``e``: if it may
        have been stored (no answer, a server error, or anything but an API error: the
        pass cancelled while it was out), it is kept in doubt with ``events``, which
        announce it once it shows stored."""
        if not isinstance(e, ApiError) or in_doubt(e):
            self.status, self.events, self.base = status, list(events), base

    def status_written(self) -> None:
        """A status write succeeded over the very version the one in doubt was tested
        against: that one was not stored, and this write's Events announce the same
        transitions."""
        self.status, self.events = None, []

    def settle(
        self, recorder: Recorder, job: JSON, pods: Sequence[JSON], services: Sequence[JSON]
    ) -> None:
        """Announce the writes in doubt that the cache (``job``, its ``pods`` and
        ``services``) now shows stored. A status in doubt is judged once the cache holds a
        newer job than the one it was written over, and forgotten then either way (if it
        was not stored, this pass plans it again)."""
        for kind, children in (("Pod", pods), ("Service", services)):
            names = self.creates.get(kind)
            if names:
                shown = names & {o["metadata"]["name"] for o in children}
                self._announce_created(recorder, job, kind, shown)
        if self.status is not None and job["metadata"].get("resourceVersion") != self.base:
            stored = _condition_states(job.get("status") or {})
            wanted = _condition_states(self.status)
            if wanted and wanted <= stored:
                for e in self.events:
                    recorder.event(job, e.type, e.reason, e.message)
            self.status, self.events = None, []

    def _announce_created(self, recorder: Recorder, job: JSON, kind: str, names: set[str]) -> None:
        """``SuccessfulCreate<kind>`` for children in doubt now known to exist."""
        if not names:
            return
        self.creates.get(kind, set()).difference_update(names)
        for message in created_messages(kind, sorted(names)):
            recorder.event(job, "Normal", f"SuccessfulCreate{kind}", message, deferrable=True)
