"""Restart in place, the operator's side: a job's pods restarted where they are by their
agents (the pod's side is :mod:`msop.integrations.agent`; the contract between the two is
:mod:`msop.integrations.wire`).

- :mod:`.pods`: what a job's pods carry for it (the agent, the barrier, the restart rule)
  and what their status says of it; pure.
- :mod:`.decisions`: the steps of a restart in place, pure, through the planning pass
  (start it, ask the agents again, release the barrier, say why it falls back to
  recreation); :mod:`msop.msjob.restarts` decides when a job restarts at all.
- :mod:`.client`: the signed requests to the pods' agents.
- :mod:`.startup`: the signing key, the agent's image and what the cluster supports.

Importing the package loads none of them (the planner imports :mod:`.pods` and :mod:`.decisions`).
"""
