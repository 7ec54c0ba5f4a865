"""Data-parallel training through Hugging Face `accelerate`: what `grpo.Trainer` needs of N processes.

Under `accelerate launch` (or torchrun) every process runs the same `lemon train`. Each one generates and
rolls out its share of the step's tasks (`shard`: every W-th task), then the update's gradients are
all-reduced by the engine accelerate picked (DDP; FSDP from an accelerate config file). Two rules keep N
processes equal to one over the whole batch:

- the loss is a token mean over the GLOBAL batch: the completion-token count is summed over processes
  (`all_sum`), and since DDP/FSDP AVERAGE gradients over the W processes, each one scales its loss by W
  (`loss_scale`); `tests/train/test_distributed.py` checks the parameters after a step against one process;
- every decision that must agree (skip a batch without signal, the adaptive sampler's history, metrics, when
  to stop) is taken on data gathered from all processes (`gather`), in task order.

On one CPU process nothing of this is loaded: `Distributed()` without an accelerator is the identity (no
wrapping, collectives return their input), so the small-machine path is the same trainer code.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast

import torch

from lemon.errors import ConfigError

log = logging.getLogger(__name__)

T = TypeVar("T")
Precision = Literal["auto", "fp32", "bf16"]


def launched_world_size() -> int:
    """How many processes the launcher started (`WORLD_SIZE`, set by accelerate launch / torchrun)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def wants_cuda() -> bool:
    """A GPU is there and not switched off with `LEMON_TRAIN_DEVICE=cpu`."""
    forced = os.environ.get("LEMON_TRAIN_DEVICE", "").strip()
    return torch.cuda.is_available() and not forced.startswith("cpu")


def resolve_precision(precision: Precision, cuda: bool) -> Literal["fp32", "bf16"]:
    """`auto` is bf16 autocast on a GPU that supports it and fp32 on the CPU (bf16 there is slow, not leaner)."""
    if precision == "auto":
        return "bf16" if cuda and torch.cuda.is_bf16_supported() else "fp32"
    return precision


@dataclass
class Distributed:
    """The process's place in a data-parallel run; `accelerator` None = one process, nothing wrapped."""

    accelerator: Any | None = None

    @property
    def rank(self) -> int:
        return 0 if self.accelerator is None else int(self.accelerator.process_index)

    @property
    def world(self) -> int:
        return 1 if self.accelerator is None else int(self.accelerator.num_processes)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def loss_scale(self) -> float:
        """DDP and FSDP average gradients over processes; a global token mean needs the sum, so scale by W."""
        return float(self.world)

    @property
    def sharded(self) -> bool:
        """FSDP: parameters are sharded, so every forward (generation included) is a collective."""
        return self.accelerator is not None and self.accelerator.distributed_type == "FSDP"

    @property
    def device(self) -> Any | None:
        """Where this process's policy goes (None: `policy.policy_device()` decides)."""
        return None if self.accelerator is None else self.accelerator.device

    def shard(self, items: Sequence[T]) -> list[T]:
        """This process's share: items rank, rank + W, ... (the inverse is `gather`)."""
        return list(items[self.rank::self.world])

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum over processes (float64, so token counts stay exact)."""
        if self.world == 1:
            return [float(v) for v in values]
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        torch.distributed.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def all_objects(self, obj: Any) -> list[Any]:
        """One picklable object from every process, in rank order, on every process."""
        if self.world == 1:
            return [obj]
        out: list[Any] = [None] * self.world
        torch.distributed.all_gather_object(out, obj)
        return out

    def gather(self, mine: Sequence[T]) -> list[T]:
        """Every process's `shard` put back in the original order (the shards of the same sequence)."""
        parts = self.all_objects(list(mine))
        out: list[T] = []
        for k in range(max(len(p) for p in parts)):
            out.extend(p[k] for p in parts if k < len(p))
        return out

    def on_main(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the main process only and hand its result, or its error, to every process."""
        result: tuple[bool, Any] = (True, None)
        if self.is_main:
            try:
                result = (True, fn())
            except Exception as exc:
                if self.world == 1:
                    raise
                result = (False, exc)
        ok, value = self.all_objects(result)[0]
        if not ok:
            raise value
        return value

    def prepare(self, model: Any, optimizer: Any) -> tuple[Any, Any]:
        """The model the update runs (DDP/FSDP-wrapped, autocast under bf16) and its optimizer."""
        if self.accelerator is None:
            return model, optimizer
        wrapped, opt = self.accelerator.prepare(model, optimizer)
        return wrapped, opt

    def unwrap(self, model: Any) -> Any:
        return model if self.accelerator is None else self.accelerator.unwrap_model(model)

    def no_sync(self, model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient all-reduce of this backward unless `sync` (only the last micro-batch syncs)."""
        if sync or self.accelerator is None or self.world == 1:
            return contextlib.nullcontext()
        return self.accelerator.no_sync(model)

    def backward(self, loss: torch.Tensor) -> None:
        if self.accelerator is None:
            loss.backward()
        else:
            self.accelerator.backward(loss)

    def clip_grad_norm(self, params: Sequence[torch.nn.Parameter], max_norm: float) -> float:
        if self.accelerator is None:
            return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
        return float(self.accelerator.clip_grad_norm_(params, max_norm))

    def same_count(self, n: int, what: str) -> None:
        """All processes must run the same number of synced backward passes, or DDP waits forever."""
        counts = self.all_objects(n)
        if len(set(counts)) > 1:
            raise ConfigError(f"processes have different numbers of {what} ({counts}); give every process an "
                              "equal share (rollout.tasks_per_step a multiple of the number of processes)")

    def wait(self) -> None:
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()

    def model_state(self, model: Any) -> dict[str, torch.Tensor] | None:
        """The whole model's weights for a checkpoint, gathered from the shards under FSDP: a collective that
        EVERY process must call (the main one gets the tensors on the CPU, the others an empty dict). None
        when the parameters are not sharded: the module saves itself."""
        if not self.sharded:
            return None
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        # full_state_dict gathers every value into one whole tensor (no shard left): the values are tensors
        return cast(dict[str, torch.Tensor], get_model_state_dict(model, options=_full_state()))

    def optimizer_state(self, model: Any, optimizer: Any) -> dict[str, Any]:
        """The optimizer's state for a checkpoint; under FSDP gathered from every shard (a collective, like
        `model_state`), keyed by parameter name, so any number of processes can load it."""
        if not self.sharded:
            return optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=_full_state())

    def load_optimizer_state(self, model: Any, optimizer: Any, state: dict[str, Any]) -> None:
        """Inverse of `optimizer_state`; under FSDP only the main process needs `state` (it is broadcast)."""
        if not self.sharded:
            optimizer.load_state_dict(state)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state,
                                 options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))


def _full_state() -> Any:
    """Full (unsharded) tensors on the main process's CPU: what a checkpoint file holds."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def open_distributed(precision: Precision = "auto") -> tuple[Distributed, Literal["fp32", "bf16"]]:
    """The process group of this run (accelerate) and its precision; one CPU process in fp32 loads nothing."""
    cuda = wants_cuda()
    chosen = resolve_precision(precision, cuda)
    if launched_world_size() == 1 and not cuda and chosen == "fp32":
        return Distributed(), chosen
    from accelerate import Accelerator

    acc = Accelerator(cpu=not cuda, mixed_precision="bf16" if chosen == "bf16" else "no")
    log.info("accelerate: %s, process %d of %d on %s, precision %s", acc.distributed_type,
             acc.process_index, acc.num_processes, acc.device, chosen)
    return Distributed(acc), chosen


def check_shares(tasks_per_step: int, world: int) -> None:
    """Every process must get the same number of tasks (equal micro-batch counts, see `same_count`)."""
    if tasks_per_step % world:
        raise ConfigError(f"rollout.tasks_per_step {tasks_per_step} is not a multiple of the {world} "
                          f"processes; use --tasks-per-step {world * max(1, round(tasks_per_step / world))}")
