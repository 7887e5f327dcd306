"""A small training script that takes part in heterojob's checkpoints (run it as a HeteroJob's command).

Linear regression by minibatch SGD in numpy. Each step's minibatch depends only on the step number, so
a run that is checkpointed, moved and resumed ends exactly where an uninterrupted run ends.

    python3 examples/train_numpy.py --steps 2000
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np

from heterojob_sdk import Checkpointer

FEATURES = 16


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(4096, FEATURES))
    w_true = rng.normal(size=FEATURES)
    return x, x @ w_true + rng.normal(scale=0.1, size=4096)


def _path(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"this example saves to file:// URIs only, not {uri}")
    return Path(parsed.path)


def save(uri: str, w: np.ndarray, step: int) -> int:
    """Write the state under `uri`; the bytes written (the SDK reports them with its ack)."""
    path = _path(uri)
    path.mkdir(parents=True, exist_ok=True)
    np.savez(path / "state.npz", w=w, step=step)
    return (path / "state.npz").stat().st_size


def load(uri: str) -> tuple[np.ndarray, int]:
    state = np.load(_path(uri) / "state.npz")
    return state["w"], int(state["step"])


def train(steps: int, ckpt: Checkpointer | None = None, stop: threading.Event | None = None,
          step_s: float = 0.0, lr: float = 0.05) -> tuple[np.ndarray, int, list[tuple[int, float]]]:
    """(weights, last step, [(step, loss)]) — resumes from ckpt.resume_from when there is one."""
    x, y = data()
    w, start = (load(ckpt.resume_from) if ckpt and ckpt.resume_from else (np.zeros(FEATURES), 0))
    losses = []
    step = start
    for step in range(start, steps):
        if stop is not None and stop.is_set():
            return w, step, losses
        batch = np.random.default_rng(step).integers(0, len(x), size=64)
        err = x[batch] @ w - y[batch]
        w = w - lr * (x[batch].T @ err) / len(batch)
        losses.append((step + 1, float(np.mean(err ** 2))))
        if ckpt is not None:
            ckpt.maybe_checkpoint(step + 1, lambda uri, w=w, s=step + 1: save(uri, w, s))
        if step_s:
            time.sleep(step_s)
    return w, steps, losses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--step-seconds", type=float, default=0.01)
    args = parser.parse_args()
    ckpt = Checkpointer()
    if ckpt.resume_from:
        print(f"resuming from {ckpt.resume_from}", flush=True)
    w, step, losses = train(args.steps, ckpt, step_s=args.step_seconds)
    print(f"done at step {step}, loss {losses[-1][1]:.5f}" if losses else f"done at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
