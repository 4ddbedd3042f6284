"""Where training reports go: a tqdm bar, an appended plain-text log, and TensorBoard scalars (rank 0 only; TensorBoard
is an optional extra, and without it training runs and says so once)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm


class RunLog:
    """Progress bar, ``train.log`` (appended across resumes) and TensorBoard writer of one run."""

    def __init__(self, save_dir: Path, enabled: bool, total_steps: int, start_step: int, progress: bool,
                 tensorboard: bool) -> None:
        self.enabled = enabled
        self.bar: tqdm[Any] | None = None
        self.writer: Any = None
        self.file = None
        if not enabled:
            return
        save_dir.mkdir(parents=True, exist_ok=True)
        self.file = open(save_dir / "train.log", "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        if progress:
            self.bar = tqdm(total=total_steps or None, initial=start_step, unit="step", dynamic_ncols=True,
                            file=sys.stderr, mininterval=1.0)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # an optional extra: the same scalars still go to metrics.jsonl
                self.line("note: tensorboard is not installed, so no tensorboard/ logs (pip install "
                          "'qknorm-nmt[tensorboard]', or --set train.tensorboard=false to silence this)")
            else:
                self.writer = SummaryWriter(str(save_dir / "tensorboard"))

    def line(self, text: str) -> None:
        """Write one line to the log file and above the progress bar."""
        if not self.enabled:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        assert self.file is not None
        self.file.write(f"{stamp} {text}\n")
        self.file.flush()
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def scalars(self, step: int, values: dict[str, float], prefix: str) -> None:
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def advance(self, n: int, postfix: dict[str, str]) -> None:
        if self.bar is not None:
            self.bar.update(n)
            self.bar.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.writer is not None:
            self.writer.close()
        if self.file is not None:
            self.file.close()
