"""``msop run``: the operator process (config, preflight checks, the manager, the MSJob
controller). Imported only when the command runs, so ``msop render``/``validate``/``version``
never load the runtime."""

from __future__ import annotations

import argparse
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from msop import __version__
from msop.api.resources import MSJOBS
from msop.controller.leaderelection import LeaderElectionConfig, LeaderElectionLost
from msop.controller.leaseguard import LeaseGuard
from msop.controller.manager import Manager, SecureServing
from msop.controller.shardelection import ShardingConfig, ShardsLetGo
from msop.informers.factory import InformerFactory
from msop.informers.reflector import ReflectorOptions
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, ApiUnavailable, is_forbidden, is_not_found
from msop.kube.flowcontrol import client_limit
from msop.kube.resources import PODGROUPS, WORKLOADS
from msop.metrics import register_process_metrics
from msop.msjob.settings import Settings, WorkerLost
from msop.msjob.setup import setup
from msop.msjob.sharding import server_splits

if TYPE_CHECKING:
    from msop.msjob.inplace.client import AgentClient
    from msop.msjob.inplace.pods import InPlace

USER_AGENT = f"msop/{__version__}"
#: The source of the Events about the operator itself (its set-up), on its own pod.
OPERATOR_EVENT_COMPONENT = "msop"
_SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _default_namespace() -> str:
    try:
        with open(_SA_NAMESPACE_FILE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


class StartupError(Exception):
    """A one-line reason the operator cannot start."""


async def _require(client: Any, res: Any, namespace: str | None, missing: str) -> None:
    """StartupError(``missing``) when ``res`` is not served (its CRD is not installed)."""
    try:
        await client.list(res, namespace, limit=1)
    except ApiError as e:
        if is_not_found(e):
            raise StartupError(missing) from None


async def _preflight(
    client: Any, namespaces: Sequence[str], gang: bool, kueue: bool = False
) -> None:
    """Fail fast, with one line, when the API server or a needed CRD is not there."""
    namespace = namespaces[0] if namespaces else None
    if kueue:
        await _require(
            client, WORKLOADS, namespace,
            "--enable-kueue needs Kueue's Workload CRD (workloads.kueue.x-k8s.io, v1beta2: "
            "Kueue 0.15 or newer), which is not installed",
        )  # fmt: skip
    if gang:
        await _require(
            client, PODGROUPS, namespace,
            "--enable-gang-scheduling needs Volcano's PodGroup CRD "
            "(podgroups.scheduling.volcano.sh), which is not installed",
        )  # fmt: skip
    try:
        await client.list(MSJOBS, namespace, limit=1)
    except ApiUnavailable as e:
        raise StartupError(f"cannot reach the API server: {e}") from None
    except ApiError as e:
        if is_not_found(e):
            raise StartupError(
                "the MSJob CRD (msjobs.mindspore.gitee.com) is not installed: "
                "kubectl apply -k config/crd"
            ) from None
        if is_forbidden(e):
            raise StartupError(f"not allowed to list MSJobs: {e.message}") from None
        raise StartupError(f"API server error: {e.status} {e.reason}: {e.message}") from None


async def _gang_scheduler(client: Any, args: argparse.Namespace) -> tuple[bool, str | None]:
    """``--gang-scheduler`` resolved: (Volcano?, the Workload API's version or None). One
    log line says what was picked and why."""
    from msop.msjob import systems

    log = structlog.get_logger("msop")
    choice = args.gang_scheduler
    if args.enable_gang_scheduling:
        if choice not in ("auto", "volcano"):
            raise StartupError(
                f"--enable-gang-scheduling means --gang-scheduler=volcano, not {choice}"
            )
        choice = "volcano"
    if choice == "volcano":
        log.info("gang scheduling with Volcano", gang_scheduler="volcano")
        return True, None
    if choice == "none":
        log.info("no gang scheduling", gang_scheduler="none")
        return False, None
    version = await systems.workload_api_version(client)
    if version is not None:
        log.info(
            "gang scheduling with Kubernetes' Workload API", gang_scheduler="kubernetes",
            api=f"scheduling.k8s.io/{version}", picked_by=choice,
        )  # fmt: skip
        return False, version
    missing = (
        "the API server does not serve Kubernetes' Workload API (scheduling.k8s.io "
        "v1beta1, or v1alpha2 with the feature gates GenericWorkload and GangScheduling and "
        "--runtime-config=scheduling.k8s.io/v1alpha2=true)"
    )
    if choice == "kubernetes":
        raise StartupError(f"--gang-scheduler=kubernetes: {missing}")
    log.info(f"no gang scheduling: {missing}", gang_scheduler="none", picked_by="auto")
    return False, None


def _secure_metrics(args: argparse.Namespace) -> SecureServing | None:
    """HTTPS and authentication on /metrics, unless --metrics-secure=false."""
    if not args.metrics_secure:
        if args.metrics_cert_dir:
            raise StartupError("--metrics-cert-dir needs --metrics-secure (it is false)")
        return None
    return SecureServing(cert_dir=args.metrics_cert_dir or None)


def _status_budget(qps: float) -> float:
    """The status writes' client-side rate (``math.inf`` without a limit)."""
    return client_limit(qps, 0)[0]


async def _restart_in_place(
    client: Any, args: argparse.Namespace, manager: Manager
) -> tuple[InPlace | None, AgentClient | None, Callable[[], Awaitable[str]] | None]:
    """What restarting jobs in place needs (``--restart-in-place``): msop.msjob.inplace's
    start-up, with the flags' values; its set-up problems go to the operator's Events
    (on its pod) and its ``/readyz``."""
    if not args.restart_in_place:
        return None, None, None
    from msop.msjob.inplace import startup

    own = args.leader_election_namespace or _default_namespace()
    started = await startup.start(
        client, namespace=own, probe_namespace=args.namespaces[0] if args.namespaces else own,
        image=args.agent_image, port=args.agent_port, restart_timeout=args.restart_in_place_timeout,
        record=manager.event_recorder(OPERATOR_EVENT_COMPONENT).event,
    )  # fmt: skip
    manager.readyz.add(startup.READY_CHECK, started.problem.ready)
    return started.in_place, started.client, started.check


async def run_operator(args: argparse.Namespace) -> int:
    log = structlog.get_logger("msop")
    register_process_metrics(__version__)
    secure_metrics = _secure_metrics(args)
    try:
        client = await KubeClient.from_config(
            args.kubeconfig, qps=args.kube_api_qps, burst=args.kube_api_burst,
            user_agent=USER_AGENT,
        )  # fmt: skip
    except Exception as e:
        raise StartupError(f"cannot load Kubernetes config: {e}") from None
    async with client:
        volcano, workload_api = await _gang_scheduler(client, args)
        await _preflight(client, args.namespaces, volcano, args.enable_kueue)
        if args.shards > 1 and not args.leader_elect:
            raise StartupError("--shards above 1 needs --leader-elect (each shard has a Lease)")
        election = None
        if args.leader_elect:
            try:
                election = LeaderElectionConfig(
                    name=args.leader_election_id,
                    namespace=args.leader_election_namespace or _default_namespace(),
                    identity=f"{socket.gethostname()}_{uuid.uuid4()}",
                    lease_duration=args.leader_election_lease_duration,
                    renew_deadline=args.leader_election_renew_deadline,
                    retry_period=args.leader_election_retry_period,
                )
            except ValueError as e:
                raise StartupError(f"leader election: {e}") from None
        sharding = None
        if election is not None and args.shards > 1:
            # The replicas share the work: no single leader; each shard has its Lease.
            split = await server_splits(client, election.namespace)
            log.info(
                "jobs split into shards", shards=args.shards,
                watch="the API server's shardSelector" if split else "every job, cached",
            )  # fmt: skip
            sharding = ShardingConfig(shards=args.shards, election=election, server_split=split)
            election = None
        try:
            manager = Manager(
                client,
                metrics_bind_address=args.metrics_bind_address,
                health_probe_bind_address=args.health_probe_bind_address,
                secure_metrics=secure_metrics,
                leader_election=election,
                graceful_shutdown_timeout=args.graceful_shutdown_timeout,
                informers=InformerFactory(
                    client, options=ReflectorOptions(stall_timeout=args.watch_stall_timeout)
                ),
            )
        except ValueError as e:
            raise StartupError(str(e)) from None
        if election is not None:
            # From --shards N back to one: the sharded replicas let go first.
            manager.add_guard(ShardsLetGo(client, election), once_leading=True)
        if args.legacy_operator_lease:
            namespace, name = args.legacy_operator_lease.split("/")
            manager.add_guard(LeaseGuard(client, namespace, name, what="ms-operator"))
        in_place, agents, recheck = await _restart_in_place(client, args, manager)
        setup(
            manager,
            Settings(
                namespaces=tuple(args.namespaces),
                max_concurrent_reconciles=args.max_concurrent_reconciles,
                gang_scheduling=volcano,
                workload_api=workload_api,
                kueue=args.enable_kueue,
                worker_lost=WorkerLost(
                    args.multikueue_worker_lost_timeout, args.multikueue_lost_copy_hold
                ),
                progress_port=args.progress_port,
                progress_interval=args.progress_interval,
                progress_writes_per_second=_status_budget(args.kube_api_qps) / 2,
                in_place=in_place,
                agents=agents,
                recheck_in_place=recheck,
                sharding=sharding,
                node_lost_after=args.node_lost_after,
            ),
        )
        log.info(
            "starting msop", version=__version__, namespaces=args.namespaces or "all",
            leader_elect=args.leader_elect, shards=args.shards, metrics=args.metrics_bind_address,
            metrics_secure=args.metrics_secure, health=args.health_probe_bind_address,
        )  # fmt: skip
        try:
            await manager.run(handle_signals=True)
        except LeaderElectionLost:
            log.error("lost the leader election lease; exiting")
            return 1
        except OSError as e:
            raise StartupError(f"cannot serve: {e}") from None
        finally:
            if agents is not None:
                await agents.close()
    log.info("msop stopped")
    return 0
