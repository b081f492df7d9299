"""Data-parallel training of a small linear model on synthetic data, on CPU.

Every pod of the MSJob runs this script; under msrun (examples/mindspore-msrun), every
process msrun starts does. The Scheduler (``MS_ROLE=MS_SCHED``) only serves the cluster
inside ``init()``; each Worker trains on its shard of the data and the gradients are
averaged across Workers by AllReduce. All cluster settings come from the ``MS_*``
variables msop puts in each pod (or msrun, from them, in each process).

It is restartable, as msop expects of a MindSpore job (docs/tasks/mindspore.md, "The
checkpoint convention"): rank 0 writes a checkpoint at the end of every epoch (atomically,
with the epoch and the global step in ``latest.json``), and a restarted cluster resumes
after the last one. Once the last epoch is saved, a restart has nothing left to train and
exits 0.

It stops cleanly on SIGTERM, as MindSpore's ``OnRequestExit`` callback does: the signal
only sets a flag; at the end of the current step the Workers agree (an AllReduce of the
flag, so that every rank stops after the same step even when the signal reached them at
different times), rank 0 saves a checkpoint of that step, and the script exits 143. A
resumed run then starts at the next step, in the middle of an epoch if need be. This is
what msop's suspend, Kueue's preemption and a pod's deletion give it: SIGTERM, and the
pod's ``terminationGracePeriodSeconds`` before SIGKILL (docs/concepts/stopping.md).

It prints one JSON object per line (``event``: start, fresh or resume, step, epoch,
stopped, done; ``step`` counts the whole run's steps) so that its progress can be read from
the pod logs, and reports it to msop with ``msop.integrations.mindspore.ProgressReporter``
(``kubectl get msjobs`` shows it), and each checkpoint with ``Reporter.checkpoint``
(``msop status`` shows where a restarted job resumes).
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
    """``<dir>/step-<n>.ckpt`` plus ``latest.json`` naming the newest complete one, with
    the epochs completed and the global step it holds."""

    def __init__(self, directory: str, steps_per_epoch: int) -> None:
        self.dir = Path(directory)
        self.latest = self.dir / "latest.json"
        self.steps_per_epoch = steps_per_epoch

    def last(self) -> tuple[int, int, Path | None]:
        """(epochs completed, global steps done, file) of the latest checkpoint."""
        try:
            info = json.loads(self.latest.read_text())
        except (OSError, ValueError):
            return 0, 0, None
        epoch = int(info["epoch"])
        return epoch, int(info.get("step", epoch * self.steps_per_epoch)), self.dir / info["file"]

    def save(self, ms: Any, net: Any, epoch: int, step: int) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"step-{step}.ckpt"
        tmp = self.dir / f".tmp-{name}"  # save_checkpoint keeps a .ckpt suffix
        ms.save_checkpoint(net, str(tmp))
        os.replace(tmp, self.dir / name)
        meta = self.dir / ".latest.json.tmp"
        meta.write_text(json.dumps({"epoch": epoch, "step": step, "file": name}))
        os.replace(meta, self.latest)
        return self.dir / name


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


class Run:
    """What one Worker's training shares with its callbacks: the network, the checkpoints,
    the reporter, and whether SIGTERM asked it to stop."""

    def __init__(self, args: argparse.Namespace, ms: Any, net: Any, rank: int) -> None:
        from mindspore import ops

        from msop.integrations import Reporter

        self.args, self.ms, self.net, self.rank = args, ms, net, rank
        self.spe = args.steps_per_epoch
        self.ckpt = Checkpoints(args.checkpoint_dir, self.spe)
        # In Worker 0 of an MSJob it serves step, epoch, loss, ETA and the last checkpoint
        # to the operator (status.progress); elsewhere it does nothing.
        self.progress = Reporter(total_steps=args.epochs * self.spe, total_epochs=args.epochs)
        self.signals: list[int] = []
        self.stopped_at: int | None = None
        self._all_reduce = ops.AllReduce()

    def catch_sigterm(self) -> None:
        """Only note the signal: the training stops at the end of the step."""
        signal.signal(signal.SIGTERM, lambda signum, _frame: self.signals.append(signum))

    def agree_to_stop(self) -> bool:
        """Whether any rank got SIGTERM: every rank asks after every step (one AllReduce of
        a float), so all stop after the same one."""
        flag = self.ms.Tensor([1.0 if self.signals else 0.0], self.ms.float32)
        return float(self._all_reduce(flag).asnumpy()[0]) > 0

    def save(self, step: int) -> None:
        """Rank 0 saves; every rank reports it (the reporter speaks only in Worker 0's pod,
        which may not hold rank 0: the Scheduler assigns ranks)."""
        epoch = step // self.spe
        file = self.ckpt.save(self.ms, self.net, epoch, step) if self.rank == 0 else None
        self.progress.checkpoint(step=step, epoch=epoch, path=file or self.ckpt.dir)


def report_callback(run: Run, before: int, *, partial: bool = False) -> Any:
    """Logs each step (``before``: the global steps done before this ``train`` call), saves
    at each epoch's end and stops after the step during which SIGTERM came (saving it).
    ``partial``: the rest of an interrupted epoch, which reports its own progress."""
    from mindspore.train import Callback

    class Report(Callback):  # type: ignore[misc]
        def on_train_step_end(self, run_context: Any) -> None:
            cb = run_context.original_args()
            step = before + cb.cur_step_num
            loss = float(cb.net_outputs.asnumpy())
            log(event="step", rank=run.rank, epoch=cb.cur_epoch_num, step=step,
                loss=round(loss, 6))  # fmt: skip
            if partial:
                run.progress.update(step=step, epoch=cb.cur_epoch_num, metrics={"loss": loss})
            if run.rank == run.args.oom_rank and before == 0 and cb.cur_epoch_num == 2:
                exhaust_memory(run.rank)
            if run.agree_to_stop():
                run.save(step)
                run.stopped_at = step
                log(event="stopped", rank=run.rank, step=step, signal="SIGTERM")
                run_context.request_stop()
            elif run.args.step_delay:
                time.sleep(run.args.step_delay)

        def on_train_epoch_end(self, run_context: Any) -> None:
            if run.stopped_at is not None:
                return  # MindSpore ends the epoch it stopped in: not a complete one
            epoch = run_context.original_args().cur_epoch_num
            run.save(epoch * run.spe)
            log(event="epoch", rank=run.rank, epoch=epoch)

    return Report()


def main() -> int:
    args = parse_args()
    import mindspore as ms
    from mindspore import nn
    from mindspore.communication import get_group_size, get_rank, init
    from mindspore.train import Model

    from msop.integrations.mindspore import ProgressReporter

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
    run = Run(args, ms, net, rank)
    run.catch_sigterm()  # after init(): ours, not one MindSpore set up in there
    done_epochs, done_steps, path = run.ckpt.last()
    if path is not None:
        ms.load_param_into_net(net, ms.load_checkpoint(str(path)))
    log(event="resume" if path else "fresh", rank=rank, size=size, epoch=done_epochs,
        step=done_steps)  # fmt: skip
    if done_epochs >= args.epochs:
        log(event="done", rank=rank, epoch=done_epochs, trained=False)
        return 0

    x, y = synthetic(args.features, run.spe * args.batch_size, seed=rank + 1)

    def dataset(skip: int = 0) -> Any:
        data = ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False)
        data = data.batch(args.batch_size)
        return data.skip(skip) if skip else data

    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=args.lr))
    if done_steps > done_epochs * run.spe:  # stopped mid-epoch: finish that epoch first
        model.train(done_epochs + 1, dataset(skip=done_steps - done_epochs * run.spe),
                    callbacks=[report_callback(run, done_steps, partial=True)],
                    initial_epoch=done_epochs, dataset_sink_mode=False)  # fmt: skip
        done_epochs += 1
    if run.stopped_at is None and done_epochs < args.epochs:
        callbacks = [report_callback(run, done_epochs * run.spe),
                     ProgressReporter(reporter=run.progress)]  # fmt: skip
        model.train(args.epochs, dataset(), callbacks=callbacks, initial_epoch=done_epochs,
                    dataset_sink_mode=False)  # fmt: skip
    run.progress.finish()
    if run.stopped_at is not None:
        return 128 + signal.SIGTERM  # what SIGTERM gives, once the checkpoint is saved
    log(event="done", rank=rank, epoch=args.epochs, trained=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
