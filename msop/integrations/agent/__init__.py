"""The restart agent: restarts every container of a training pod in place, when msop asks.

When one pod of an MSJob fails, every process of the job has to start over together (the
collective communication of the survivors cannot take a new peer in). Deleting and
recreating the pods is slow (scheduling, image checks, volumes, a new IP), so msop restarts
them in place instead, with Kubernetes 1.36's container ``restartPolicyRules``: a container
that exits with a code matching a ``RestartAllContainers`` rule makes the kubelet kill every
container of its pod and start them again, init containers first, in order; the pod keeps
its UID, IP and emptyDir volumes. msop gives every pod of such a job two containers running
this package (``python -m msop.integrations.agent``), both mounting one emptyDir at
``$MSOP_AGENT_DIR``:

- ``msop-agent``, a native sidecar (an init container with ``restartPolicy: Always``) that
  runs ``serve``: a small HTTP server at the pod's IP. Its rule matches exit code
  ``AGENT_RESTART_EXIT_CODE`` (75), so when msop tells it the job's restart generation moved
  on (``POST /restart``) it exits with 75, and the kubelet restarts the whole pod;
- ``msop-barrier``, a regular init container after it, which runs ``barrier``: it waits until
  msop releases the pod's generation (``POST /release``), which msop does once every pod of
  the job has restarted, so that no training process starts before all were restarted.
  It is a container of its own because init containers run again only when the pod starts
  and on a restart of all containers, never when the sidecar alone restarts.

Why signatures: the pods have no API credentials to check who is calling, and anything in
the cluster network can reach the port. msop signs each request with its private P-256 key
(ECDSA, SHA-256, from ``cryptography``: :mod:`msop.integrations.signature`); the agent
holds only the public key (``$MSOP_AGENT_KEY``). The signed message
(:func:`msop.integrations.wire.signed_message`) names the action, the job's UID and the
generation, so a request cannot be replayed on another job, turned into the other action,
or moved to another generation; a replay of the same request finds the pod at that
generation already and does nothing. It names no pod: msop signs once per job, action and
generation, and sends the same request to every pod.

Generations: the pod's state is ``state.json`` in ``$MSOP_AGENT_DIR``,
``{"generation": g, "requested": bool, "waiting": bool}``, plus ``released``, the highest
generation msop released (absent: none). Both files are replaced atomically (a temporary
file and :func:`os.replace`), so a reader sees the old file or the new one; the
read-modify-writes of ``state.json`` by the two containers take an ``flock`` on ``.lock``.

- The barrier, on the pod's first start (no ``state.json``), writes the generation msop
  created the pod with (``$MSOP_AGENT_GENERATION``) and exits at once.
  A pod made to replace a lost member while the others restart in place (a hybrid
  restart, ``$MSOP_AGENT_HOLD`` = ``1``) waits instead, like a restarted pod, for msop to
  release that generation: it starts with the others.
- ``POST /restart`` with a generation above the pod's writes it with ``requested: true``,
  answers 202 and exits 75. The barrier that runs next keeps that generation and waits.
- A pod whose own training container failed restarts without asking anyone (``requested``
  is false): its barrier moves it to the next generation and waits. msop sees a pod ahead
  of the job, moves the job to that generation, and asks the other pods (to whom that
  generation is news) to restart.
- A barrier interrupted while waiting (the pod restarted before its release, with no
  request) waits for the same generation again: nothing ran at it, so nothing failed.
- A restart accepted while the barrier waits keeps the barrier waiting, even once its own
  generation is released: the restart of every container follows, and runs it again.
- The sidecar restarting alone (it crashed) reads the files and changes nothing.
- A ``state.json`` that does not parse (our writes are atomic: only a disk fault or a
  hand edit can do that) is logged and read as ``{"generation": max(env, released),
  "requested": false}``: the pod did run before, at least at the generation it was last
  released for, so the barrier treats the restart as a failure of the pod, at the next
  generation, and waits for msop rather than letting training start uncoordinated.

The barrier has no timeout of its own: msop bounds the wait and falls back to deleting the
pod.

The package: :mod:`.config` (the environment), :mod:`.state` (the two files),
:mod:`.server` (``serve``: the requests, served by the pod's one HTTP server,
:mod:`msop.integrations.podhttp`), :mod:`.barrier` and
:mod:`.main` (the command). The wire contract, the signed message included, is
:mod:`msop.integrations.wire`; the signatures are :mod:`msop.integrations.signature`
(``cryptography``: the agent runs from the operator's image, never a training image).
Importing the package loads nothing; ``serve`` and the barrier import only what they run.
"""
