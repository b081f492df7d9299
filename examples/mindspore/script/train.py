"""Data-parallel training of a small linear model on synthetic data, on CPU.

Every pod of the MSJob runs this script; under msrun (examples/mindspore-msrun), every
process msrun starts does. The Scheduler (``MS_ROLE=MS_SCHED``) only serves the cluster
inside ``init()``; each Worker trains on its shard of the data and the gradients are
averaged across Workers by AllReduce. All cluster settings come from the ``MS_*``
variables msop puts in each pod (or msrun, from them, in each process).

It is restartable, as msop expects of a MindSpore job (docs/tasks/mindspore.md, "The
checkpoint convention"): rank 0 writes a checkpoint at the end of every epoch (atomically,
with the epoch in ``latest.json``), and a restarted cluster resumes after the last one.
Once the last epoch is saved, a restart has nothing left to train and exits 0.

It prints one JSON object per line (``event``: start, resume, step, epoch, done) so that
its progress can be read from the pod logs, and reports it to msop with
``msop.integrations.mindspore.ProgressReporter`` (``kubectl get msjobs`` shows it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def log(**fields: Any) -> None:
    print(json.dumps({"time": round(time.time(), 3), **fields}), flush=True)


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description="Data-parallel MindSpore example for msop.")
    p.add_argument("--epochs", type=int, default=int(env("EPOCHS", "20")))
    p.add_argument("--steps-per-epoch", type=int, default=int(env("STEPS_PER_EPOCH", "10")))
    p.add_argument("--batch-size", type=int, default=16, help="per worker")
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument(
        "--step-delay",
        type=float,
        default=float(env("STEP_DELAY", "0")),
        help="seconds to sleep after each step (makes a short run last long enough to watch)",
    )
    p.add_argument("--checkpoint-dir", default=env("CHECKPOINT_DIR", "/checkpoints"))
    p.add_argument(
        "--oom-rank",
        type=int,
        default=int(env("OOM_RANK", "-1")),
        help="fault injection for tests: this rank allocates memory until the kernel kills it, "
        "in epoch 2 of a run that started fresh (a restart, which resumes, does not)",
    )
    return p.parse_args()


def synthetic(features: int, rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """y = x . w* + b* + noise, with the same w*, b* for every shard."""
    truth = np.random.default_rng(0)
    w = truth.normal(size=(features, 1)).astype(np.float32)
    b = np.float32(0.5)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    y = x @ w + b + rng.normal(scale=0.01, size=(rows, 1)).astype(np.float32)
    return x, y


class Checkpoints:
    """``<dir>/epoch-<n>.ckpt`` plus ``latest.json`` naming the newest complete one."""

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)
        self.latest = self.dir / "latest.json"

    def last_epoch(self) -> tuple[int, Path | None]:
        try:
            info = json.loads(self.latest.read_text())
        except (OSError, ValueError):
            return 0, None
        return int(info["epoch"]), self.dir / info["file"]

    def save(self, ms: Any, net: Any, epoch: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"epoch-{epoch}.ckpt"
        tmp = self.dir / f".tmp-{name}"  # save_checkpoint keeps a .ckpt suffix
        ms.save_checkpoint(net, str(tmp))
        os.replace(tmp, self.dir / name)
        meta = self.dir / ".latest.json.tmp"
        meta.write_text(json.dumps({"epoch": epoch, "file": name}))
        os.replace(meta, self.latest)


def exhaust_memory(rank: int) -> None:
    """Allocate (and touch) 64 MiB at a time until the kernel's OOM killer ends us."""
    log(event="oom", rank=rank)
    hog = []
    while True:
        hog.append(np.ones(16 << 20, dtype=np.float32))


def serve_until_stopped(role: str) -> int:
    """A parameter server's part once it has joined: stay in the cluster until stopped.

    It must not leave while the training runs: once the cluster has formed, each Worker's
    ``init()`` asks the Scheduler for every member's host name, which it only answers
    while every member is still registered. A member gone by then makes that ``init()``
    fail ("Failed to AllGather host's hash name due to timeout", exit 1, about 200 s
    later). MindSpore 2.10 gives a server no way to learn that the Workers are done, so
    it serves until SIGTERM (the kubelet's, when msop deletes the pod at the job's end,
    cleanPodPolicy Running) or SIGINT, then leaves the cluster and exits 0.
    """
    stop: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    while not stop:
        time.sleep(1)  # the handlers run in this thread, between the sleeps
    log(event="stopped", role=role, signal=signal.Signals(stop[0]).name)
    return 0


def main() -> int:
    args = parse_args()
    import mindspore as ms
    from mindspore import nn
    from mindspore.communication import get_group_size, get_rank, init
    from mindspore.train import Callback, Model

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_device("CPU")
    role = os.environ.get("MS_ROLE", "")
    log(event="start", role=role, node=os.environ.get("MS_NODE_ID"),
        workers=os.environ.get("MS_WORKER_NUM"), rank_id=os.environ.get("RANK_ID"))  # fmt: skip
    # The Scheduler serves the cluster inside init() and exits there once every other
    # member has left. A parameter server returns from it once registered.
    init()
    if role != "MS_WORKER":
        log(event="joined", role=role)
        return serve_until_stopped(role)
    rank, size = get_rank(), get_group_size()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    ms.set_seed(1)

    net = nn.Dense(args.features, 1)
    ckpt = Checkpoints(args.checkpoint_dir)
    done_epochs, path = ckpt.last_epoch()
    if path is not None:
        ms.load_param_into_net(net, ms.load_checkpoint(str(path)))
    log(event="resume" if path else "fresh", rank=rank, size=size, epoch=done_epochs)
    if done_epochs >= args.epochs:
        log(event="done", rank=rank, epoch=done_epochs, trained=False)
        return 0

    rows = args.steps_per_epoch * args.batch_size
    x, y = synthetic(args.features, rows, seed=rank + 1)
    data = ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(args.batch_size)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=args.lr))

    class Report(Callback):  # type: ignore[misc]
        def on_train_step_end(self, run_context: Any) -> None:
            cb = run_context.original_args()
            loss = float(cb.net_outputs.asnumpy())
            log(event="step", rank=rank, epoch=cb.cur_epoch_num, step=cb.cur_step_num,
                loss=round(loss, 6))  # fmt: skip
            if rank == args.oom_rank and done_epochs == 0 and cb.cur_epoch_num == 2:
                exhaust_memory(rank)
            if args.step_delay:
                time.sleep(args.step_delay)

        def on_train_epoch_end(self, run_context: Any) -> None:
            epoch = run_context.original_args().cur_epoch_num
            if rank == 0:
                ckpt.save(ms, net, epoch)
            log(event="epoch", rank=rank, epoch=epoch)

    # msop's progress reporter: in Worker 0 of an MSJob it serves step, epoch, loss and ETA
    # to the operator (status.progress, the Progress column); elsewhere it does nothing.
    from msop.integrations.mindspore import ProgressReporter

    model.train(args.epochs, data, callbacks=[Report(), ProgressReporter()],
                initial_epoch=done_epochs, dataset_sink_mode=False)  # fmt: skip
    log(event="done", rank=rank, epoch=args.epochs, trained=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
