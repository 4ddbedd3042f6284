"""What one training run owns: config, runtime, data, model, optimizer, schedule, loss scaler and progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nmt import kernels
from nmt.config import Config
from nmt.machine.runtime import Runtime
from nmt.model.transformer import Transformer, build_model
from nmt.training import rng
from nmt.training.data import TrainingData, load_training_data
from nmt.training.ema import WeightAverage
from nmt.training.optim import LRController, build_optimizer


@dataclass
class Progress:
    """Everything about where a run stands that a checkpoint must carry besides tensors."""

    step: int = 0
    epoch: int = 1
    batch_in_epoch: int = 0
    best_bleu: float = -1.0
    best_step: int = 0
    evals_since_best: int = 0
    skipped_steps: int = 0
    train_seconds: float = 0.0
    last_eval_step: int = -1
    stopped: str = ""  # why the run stopped by itself (a finished run); "" while it runs or after an interrupt
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunState:
    """The objects of one run; ``net`` is the model as trained (DDP and/or compiled around ``model``)."""

    cfg: Config
    rt: Runtime
    data: TrainingData
    model: Transformer
    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    lr: LRController
    scaler: torch.amp.GradScaler
    progress: Progress = field(default_factory=Progress)
    saved_step: int | None = None  # step of the checkpoint_last.pt this run wrote or resumed from
    ema: WeightAverage | None = None  # train.ema_decay > 0: the moving average of the weights

    @property
    def save_dir(self) -> Path:
        return Path(self.cfg.train.save_dir)

    @classmethod
    def build(cls, cfg: Config, runtime: Runtime) -> RunState:
        """Load the data, seed, build the accelerated model (:func:`nmt.kernels.accelerate`), wrap it for DDP and
        ``torch.compile`` as configured, and build the optimizer, schedule and scaler."""
        data = load_training_data(cfg)
        rng.seed_all(cfg.train.seed + runtime.rank)
        model = kernels.accelerate(build_model(cfg.model, data.spec)).to(runtime.device)
        net: torch.nn.Module = model
        if runtime.distributed:
            ids = [runtime.device.index] if runtime.device.type == "cuda" else None
            net = torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
        if cfg.train.compile:
            net = torch.compile(net)  # type: ignore[assignment]
        t = cfg.train
        ema = WeightAverage(model, t.ema_decay, t.ema_start) if t.ema_decay > 0 else None
        return cls(cfg, runtime, data, model, net, build_optimizer(model, t), LRController(t, cfg.model.d_model),
                   torch.amp.GradScaler(runtime.device.type, enabled=runtime.precision == "fp16"), ema=ema)
