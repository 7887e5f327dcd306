"""Speeds for the classes a job has not run on, estimated from what the fleet measured, each with a confidence.
Pure.

Step of the pipeline: before the queue policy (`engine.queue.policy`), the operator (`state.knowledge`) and the
replay (`replay.knowledge`) turn every job's measured steps/s (the SDK's step metric, status.scheduling.speeds)
into one `Estimates`, and read each job's sheet from it (`Estimates.of`): what `engine.queue.completion.speeds`
scales the job's own measurements by on the classes it has not run on.

1. Jobs alike pool their measurements (`fingerprint`): the job's `spec.workload` where it names one, else its
   pod template's image, command and arguments with its size (the same program at the same size runs at the
   same speed). A row of the (job x class) table is one fingerprint: per class, the median steps/s per device
   over its jobs (`completion.pooled`). A caller that knows a workload job's size keys it by both (`sized`): a
   model's speed ratio between two classes depends on its size (each class's interconnect scales it its own
   way: in Gavel's table a language model at 8 devices runs at 0.19 of V100 on P100, at 1 device at 0.83), so
   one row per workload, the median per class over jobs of every size, mixed those ratios. A class a size of
   a workload never ran on reads the workload's ratio over the other sizes (before the model's fill, which
   knows nothing of the workload), and a size nobody measured the workload's row over every size; both
   unsure (explored).
2. Across fingerprints, a low-rank model of the table fills the cells nobody measured (matrix completion, as
   Gavel's throughput estimator, Paragon and Quasar do), in log space: log speed[j, c] = a_j + b_c + u_j . v_c
   (a_j: how heavy the job is; b_c: how fast the class is; u_j . v_c: how this model's kind of work fares on
   that class, e.g. a recurrent model losing 12x from V100 to K80 where a convolutional one loses 3x), fitted
   by alternating ridge regressions over the measured cells (numpy, a few dozen small batched solves); the
   interaction's rank is chosen by how well each predicts held-out measured cells (`fit`).
3. Each estimate carries a confidence in [0, 1] (`Estimate.confidence`): 1 where the row measured the class,
   `n / (n + 0.25)` for `n` jobs there; for a filled cell, how well the model predicts a held-out measured
   cell from as many measured cells as the row has (`SpeedModel.quality`: 1 - the median absolute log error over
   ln 2), 0 when too few rows are complete to tell (then the declared throughput is the guess, as before).
   The policy trusts a class whose confidence reaches `SURE` and explores one below it (`engine.queue.policy`:
   an unsure class is probed, `completion.plan_upgrades`).

Costs: one fit per change of the table (a new fingerprint or class measured, or a sample count reaching a
power of two): O(rows x classes x iterations); reading a job's sheet is a dictionary look-up.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from heterojob.engine.queue import completion

SURE = 0.7  # an estimate at least this confident is trusted (no probe), below it the class is explored
MIN_ROWS = 3  # rows measured on a class and at least one other before the model fills cells
RIDGE = 0.1  # ridge on the interaction terms (log units)
ITERATIONS = 30


def fingerprint(workload: str | None, image: str | None = None, command: Sequence[str] = (),
                args: Sequence[str] = (), size: int = 1) -> str:
    """What pools jobs alike: `spec.workload` where given (across sizes: speeds are compared per device), else a
    digest of the image, command and arguments, with the size (replicas x devices per replica)."""
    if workload:
        return f"workload:{workload}"
    digest = hashlib.sha256(json.dumps([image or "", list(command), list(args)]).encode()).hexdigest()[:16]
    return f"spec:{digest}:{size}"


SIZED = "|size="  # between a workload's fingerprint and its size (`sized`)


def sized(key: str, size: int) -> str:
    """A workload's fingerprint (`fingerprint` of a `spec.workload`) at one size: its own row, which falls back to
    the workload's over every size while that size has no measurement (`Estimates.of`). A program's fingerprint
    already holds its size."""
    return f"{key}{SIZED}{size}" if key.startswith("workload:") else key


def _unsized(key: str) -> str | None:
    """The workload row a `sized` key (or `namespace/` and one, as the operator keys them) falls back to (None: not
    a sized key)."""
    base, sep, size = key.rpartition(SIZED)
    return base if sep and size.isdigit() and (base.startswith("workload:") or "/workload:" in base) else None


@dataclass(frozen=True)
class Estimate:
    """One fingerprint's speed per class (steps/s per device, or any unit common to its classes) and the
    confidence of each."""

    speed: Mapping[str, float]
    confidence: Mapping[str, float]

    def sure(self, at: float = SURE) -> frozenset[str]:
        """The classes whose estimate is trusted."""
        return frozenset(c for c, v in self.confidence.items() if v >= at)


@dataclass(frozen=True)
class SpeedModel:
    """The fitted low-rank model over `classes` (`fit`)."""

    classes: tuple[str, ...]
    bias: np.ndarray  # b_c
    vectors: np.ndarray  # v_c, classes x rank
    quality: Mapping[int, float] = field(default_factory=dict)  # measured cells in a row -> confidence of a fill

    def row(self, observed: Mapping[str, float]) -> dict[str, float]:
        """log speed per class of a row measured on `observed` (log values): its a_j and u_j by ridge on those
        cells, the rest predicted; measured cells keep their value."""
        idx = {c: i for i, c in enumerate(self.classes)}
        cells = [(idx[c], v) for c, v in observed.items() if c in idx]
        rank = self.vectors.shape[1]
        if cells:
            design = np.array([[1.0, *self.vectors[i]] for i, _ in cells])
            target = np.array([v - self.bias[i] for i, v in cells])
            ridge = np.diag([0.0] + [RIDGE] * rank)
            coef = np.linalg.solve(design.T @ design + ridge + 1e-9 * np.eye(rank + 1), design.T @ target)
        else:
            coef = np.zeros(rank + 1)
        pred = self.bias + self.vectors @ coef[1:] + coef[0]
        out = {c: float(pred[i]) for c, i in idx.items()}
        out.update({c: v for c, v in observed.items() if c in idx})
        return out


def fit(rows: Mapping[str, Mapping[str, float]], classes: Sequence[str], rank: int | None = None) -> SpeedModel | None:
    """The low-rank model of `rows` (fingerprint -> class -> speed, positive); None with fewer than `MIN_ROWS`
    rows measured on two classes or more. `rank`: of the interaction; None: each rank from 0 to
    min(2, classes - 2) is fitted and the one whose held-out cells are predicted best is kept (`SpeedModel.quality`;
    on Gavel's 3-class table the additive model, rank 0, predicts best: an interaction overfits 3 columns)."""
    if rank is None:
        fits = [f for k in range(max(0, min(2, len(classes) - 2)) + 1) if (f := fit(rows, classes, k)) is not None]
        return max(fits, key=lambda f: (sum(f.quality.values()) / max(1, len(f.quality)), -f.vectors.shape[1]),
                   default=None)
    classes = tuple(classes)
    k = rank
    names = [r for r, cells in rows.items() if sum(1 for c in classes if cells.get(c, 0) > 0) >= 2]
    if len(names) < MIN_ROWS or not classes:
        return None
    x = np.zeros((len(names), len(classes)))
    mask = np.zeros_like(x, dtype=bool)
    for i, r in enumerate(names):
        for j, c in enumerate(classes):
            val = rows[r].get(c, 0.0)
            if val > 0 and math.isfinite(val):
                x[i, j], mask[i, j] = math.log(val), True
    m = mask.astype(float)
    # start: additive (a_j + b_c), small interactions (deterministic)
    a = (x * m).sum(1) / m.sum(1)
    b = np.array([(((x - a[:, None]) * m)[:, j].sum() / m[:, j].sum()) if m[:, j].any() else 0.0
                  for j in range(len(classes))])
    u = np.tile(np.linspace(-0.1, 0.1, len(names))[:, None], (1, k)) if k else np.zeros((len(names), 0))
    v = np.zeros((len(classes), k))
    eye = np.eye(k + 1)
    ridge = np.diag([0.0] + [RIDGE] * k)
    for _ in range(ITERATIONS):
        # columns: (b_c, v_c) given (a_j, u_j)
        design = np.concatenate([np.ones((len(names), 1)), u], axis=1)  # rows x (k+1)
        target = x - a[:, None]
        lhs = np.einsum("rc,ri,rj->cij", m, design, design) + ridge + 1e-9 * eye
        rhs = np.einsum("rc,ri,rc->ci", m, design, target)
        coef = np.linalg.solve(lhs, rhs[..., None])[..., 0]
        b, v = coef[:, 0], coef[:, 1:]
        # rows: (a_j, u_j) given (b_c, v_c)
        design = np.concatenate([np.ones((len(classes), 1)), v], axis=1)  # classes x (k+1)
        target = x - b[None, :]
        lhs = np.einsum("rc,ci,cj->rij", m, design, design) + ridge + 1e-9 * eye
        rhs = np.einsum("rc,ci,rc->ri", m, design, target)
        coef = np.linalg.solve(lhs, rhs[..., None])[..., 0]
        a, u = coef[:, 0], coef[:, 1:]
    model = SpeedModel(classes, b, v)
    return SpeedModel(classes, b, v, _quality(model, x, mask))


def _quality(model: SpeedModel, x: np.ndarray, mask: np.ndarray) -> dict[int, float]:
    """Confidence of a filled cell by how many cells its row measured: each measured cell predicted from every
    subset of that many other measured cells of its row (the class terms are the fit's, so slightly
    optimistic); 1 - median |log error| / ln 2, at least 0. With none measured: the ratio between two classes
    from the class terms alone against the rows' own."""
    errors: dict[int, list[float]] = {}
    classes = model.classes
    for i in range(x.shape[0]):
        cells = [j for j in range(len(classes)) if mask[i, j]]
        for hidden in cells:
            rest = [j for j in cells if j != hidden]
            for n in range(1, len(rest) + 1):
                for subset in itertools.combinations(rest, n):
                    pred = model.row({classes[j]: x[i, j] for j in subset})[classes[hidden]]
                    errors.setdefault(n, []).append(abs(pred - x[i, hidden]))
        blind = model.row({})
        for p, q in itertools.combinations(cells, 2):
            errors.setdefault(0, []).append(abs((blind[classes[p]] - blind[classes[q]]) - (x[i, p] - x[i, q])))
    return {n: max(0.0, 1.0 - float(np.median(e)) / math.log(2)) for n, e in errors.items()}


@dataclass(frozen=True)
class Estimates:
    """What the fleet measured (`build`): each fingerprint's `Estimate`, and the model for a fingerprint nobody
    measured yet."""

    declared: Mapping[str, float]
    rows: Mapping[str, Estimate]
    model: SpeedModel | None
    version: int = 0
    # a workload's row over every size (`sized`), for a size of it nobody measured: unsure
    workloads: Mapping[str, Estimate] = field(default_factory=dict)

    def of(self, key: str | None) -> Estimate:
        """The estimate of a fingerprint (a `sized` workload key nobody measured: the workload's over every size;
        None or unmeasured: the model's class terms, else the declared throughput; both unsure)."""
        if key is not None and key in self.rows:
            return self.rows[key]
        base = _unsized(key) if key is not None else None
        if base is not None and base in self.workloads:
            return self.workloads[base]
        return self.unmeasured

    @cached_property
    def unmeasured(self) -> Estimate:
        """The estimate of a fingerprint nobody measured: one object per `Estimates` (what a planner keeps per
        object between passes finds it again, for each of thousands of such jobs)."""
        return _unmeasured(self.declared, self.model)


def _unmeasured(declared: Mapping[str, float], model: SpeedModel | None) -> Estimate:
    if model is None:
        return Estimate(dict(declared), dict.fromkeys(declared, 0.0))
    logs = model.row({})
    conf = model.quality.get(0, 0.0)
    return Estimate({c: math.exp(logs[c]) if c in logs else v for c, v in declared.items()},
                    {c: conf if c in logs else 0.0 for c in declared})


def build(declared: Mapping[str, float], samples: Mapping[str, Iterable[Mapping[str, float]]],
          version: int = 0) -> Estimates:
    """`Estimates` from each fingerprint's jobs' measurements (steps/s per device per class, one mapping per
    job): rows pooled (`completion.pooled`), the model fitted, every row's cells filled; the `sized` rows of a
    workload also pooled over every size (`Estimates.workloads`, outside the fit: its rows are already in it)."""
    counts: dict[str, dict[str, int]] = {}
    rows: dict[str, dict[str, float]] = {}
    by_workload: dict[str, list[Mapping[str, float]]] = {}
    for key, jobs in samples.items():
        jobs = list(jobs)
        rows[key] = {c: v for c, v in completion.pooled(jobs).items() if c in declared}
        counts[key] = {c: sum(1 for j in jobs if j.get(c, 0) > 0) for c in rows[key]}
        base = _unsized(key)
        if base is not None:
            by_workload.setdefault(base, []).extend(jobs)
    classes = tuple(declared)
    model = fit(rows, classes)
    out = _filled(declared, rows, counts, model)
    if not by_workload:
        return Estimates(dict(declared), out, model, version)
    wrows = {k: {c: v for c, v in completion.pooled(jobs).items() if c in declared} for k, jobs in by_workload.items()}
    wcounts = {k: {c: sum(1 for j in by_workload[k] if j.get(c, 0) > 0) for c in wrows[k]} for k in wrows}
    # another size's ratios are a guess for this one: explored, never trusted (below `SURE`)
    workloads = {k: Estimate(e.speed, {c: min(v, SURE / 2) for c, v in e.confidence.items()})
                 for k, e in _filled(declared, wrows, wcounts, model).items()}
    members: dict[str, list[str]] = {}
    for key in rows:
        if (base := _unsized(key)) is not None:
            members.setdefault(base, []).append(key)
    for base, keys in members.items():  # a class a size never ran on: the workload's ratio at its other sizes
        for key in keys:
            cells = rows[key]
            if not cells or key not in out:
                continue
            guesses: dict[str, list[float]] = {}
            for other in keys:
                theirs = rows[other]
                for c, v in theirs.items():
                    if c not in cells:
                        guesses.setdefault(c, []).extend(cells[k] * v / theirs[k] for k in cells if k in theirs)
            speed = {c: statistics.median(g) for c, g in guesses.items() if g}
            # ... else (no size measured both) the workload's per-device medians over every size, scaled to it
            pooled = completion.sheet(wrows[base], cells)
            speed.update({c: pooled[c] for c in wrows[base] if c not in cells and c not in speed})
            if speed:
                est = out[key]
                out[key] = Estimate({**est.speed, **speed},
                                    {**est.confidence, **{c: workloads[base].confidence[c] for c in speed}})
    return Estimates(dict(declared), out, model, version, workloads)


def _filled(declared: Mapping[str, float], rows: Mapping[str, Mapping[str, float]],
            counts: Mapping[str, Mapping[str, int]], model: SpeedModel | None) -> dict[str, Estimate]:
    """Each row's estimate: its measured cells, the rest filled by `model` (else the declared throughput scaled)."""
    classes = tuple(declared)
    out: dict[str, Estimate] = {}
    for key, cells in rows.items():
        if not cells:
            continue
        if model is None:  # too little measured to learn from: the declared throughput scaled to the row
            speed = completion.sheet(declared, cells)
            conf = {c: counts[key][c] / (counts[key][c] + 0.25) if c in cells else 0.0 for c in speed}
        else:
            logs = model.row({c: math.log(v) for c, v in cells.items()})
            quality = model.quality.get(len(cells), 0.0)
            speed = {c: math.exp(logs[c]) for c in classes}
            conf = {c: counts[key][c] / (counts[key][c] + 0.25) if c in cells else quality for c in classes}
        out[key] = Estimate(speed, conf)
    return out
