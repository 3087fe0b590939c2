"""Who trains, when, and where: the training backend with its failover, one group's
retraining as a job, and the queue of groups due for it (with the background thread and
the backlog that writers wait on).

Folding a group's insert buffer into its merged keys (:meth:`LiveIndex.fold`) keeps its
model and recomputes exact error bounds, so lookups stay exact whatever the model; a
*retrain* refits the model to the group's keys so that its error window is small again.
A retrain is a :class:`Job`: its inputs are taken under the store's writer lock (the key
arrays, which never change, the memo and the keys written since it), the model is fitted
without the lock (SIA incremental QR on the memoized R plus the new keys' rows, or a full
QR; Numba releases the GIL, the server and the emulated FPGA train in their own process or
thread), and the result is published under the lock with exact error bounds over the
group's keys *at that moment*: a model fitted to slightly older keys is still exact.
A trainer that takes batches (``train_keys``: the server, one round trip) is handed up to
:data:`BATCH_GROUPS` due groups at once, as their keys.
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
import numpy as np

from learnedidx.errors import ConfigError, LearnedIdxError, is_offload_failure
from learnedidx.index import foldin as FI
from learnedidx.index import kernels as K
from learnedidx.index import layout as L
from learnedidx.index import fitting as F
from learnedidx.index import parallel
from learnedidx.index.fitting import Fits, fit_groups
from learnedidx.index.keys import KeyBatch
from learnedidx.index.live import Group, LiveIndex, Memo
from learnedidx.index.options import StoreOptions
from learnedidx.index.qr import CpuBackend
from learnedidx.index.training import KeysJob, TrainingBackend, feature_limit, get_backend

log = logging.getLogger(__name__)


class Retrainer:
    """Trains group models on the store's trainer.  When an offloading trainer fails (the
    accelerator server died, say: :func:`~learnedidx.errors.is_offload_failure`), groups
    are trained in-process with ``cpu`` and the trainer is tried again every
    ``trainer_retry`` seconds; any other error (a wrong request or configuration) is raised."""

    def __init__(self, opts: StoreOptions) -> None:
        try:
            self.trainer: TrainingBackend = (get_backend(opts.trainer, **opts.trainer_options)
                                             if isinstance(opts.trainer, str) else opts.trainer)
        except ConfigError as exc:
            raise ConfigError(f"trainer: {exc}") from None
        limit = feature_limit(self.trainer)
        if limit is not None and opts.max_features > limit:
            raise ConfigError(f"max_features {opts.max_features} exceeds the {limit} features training "
                              f"backend {self.name} supports")
        self.cpu = self.trainer if getattr(self.trainer, "name", "") == "cpu" else CpuBackend()
        self.max_features = opts.max_features
        self.retry = opts.trainer_retry
        self.failed = False
        self._failed_at = 0.0
        self._lock = threading.Lock()  # the counters below, updated by several threads
        self.stats = {"retrains_full": 0, "retrains_incremental": 0, "train_seconds": 0.0, "device_cycles": 0}
        if hasattr(self.trainer, "train_keys"):
            _warm_batch_steps(self.max_features)

    @property
    def name(self) -> str:
        return getattr(self.trainer, "name", str(self.trainer))

    def _retrying(self) -> bool:
        """Whether the failed trainer is due to be tried again."""
        return self.failed and time.monotonic() - self._failed_at >= self.retry

    def _count(self, full: int, incremental: int, seconds: float, cycles: int = 0) -> None:
        with self._lock:
            self.stats["retrains_full"] += full
            self.stats["retrains_incremental"] += incremental
            self.stats["train_seconds"] += seconds
            self.stats["device_cycles"] += cycles

    def train_all(self, arena: np.ndarray, offsets: np.ndarray, bounds: np.ndarray) -> Fits | None:
        """Every group between consecutive ``bounds`` of the sorted keys trained from
        scratch at once (:func:`~learnedidx.index.fitting.fit_groups`), when training runs
        in-process on the cpu backend; None otherwise (the caller then trains each group
        through :meth:`train`)."""
        backend = self.cpu if self.failed and not self._retrying() else self.trainer
        if type(backend) is not CpuBackend:
            return None
        t0 = time.perf_counter()
        fits = fit_groups(arena, offsets, bounds, self.max_features)
        self._count(int(np.count_nonzero(np.diff(bounds) > 1)), 0, time.perf_counter() - t0)
        return fits

    def in_process(self) -> bool:
        """Whether retrains run in-process on the cpu backend now (:meth:`fit_here`)."""
        return type(self.cpu if self.failed and not self._retrying() else self.trainer) is CpuBackend

    def fit_here(self, jobs: list[tuple], parts: int = 1) -> list[tuple]:
        """Groups retrained in this process, whatever the store's trainer, in compiled calls
        that release the GIL (:func:`~learnedidx.index.fitting.fit_jobs`, as
        :func:`~learnedidx.index.fitting.fit_one` does each) on up to ``parts`` cores; each
        job is ``(kbytes, offs, n, memo, use_memo, pending)``, each result ``(coef, prefix,
        feat, R, incremental, lo, hi)``."""
        G, mm = len(jobs), self.max_features + 1
        table = np.zeros((G, F.J_COLS), np.int64)
        keep = []  # what the table points into, alive until the call returns
        for t, (kbytes, offs, n, memo, use_memo, pending) in enumerate(jobs):
            joined = KeyBatch.joined([(b.arena, b.offsets) for b in pending])
            R = np.ascontiguousarray(memo.R, np.float64) if memo is not None else _NO_R
            kbytes, offs = np.ascontiguousarray(kbytes, np.uint8), np.ascontiguousarray(offs, np.int64)
            # The compiled call reads these by address, without bounds checks: every size it
            # is told must be the array's own.
            if memo is not None and R.shape != (memo.feat + 1, memo.feat + 1):
                raise LearnedIdxError(f"memo R of shape {R.shape} for {memo.feat} features")
            if offs.size < n + 1 or (n > 0 and (offs[0] < 0 or offs[n] > kbytes.size)):
                raise LearnedIdxError("key offsets past the key bytes")
            keep.append((kbytes, offs, R, joined))
            table[t] = (kbytes.ctypes.data, kbytes.size, offs.ctypes.data, n, R.ctypes.data,
                        memo.prefix if memo else -1, memo.feat if memo else -1, use_memo and memo is not None,
                        joined.arena.ctypes.data, joined.arena.size, joined.offsets.ctypes.data,
                        joined.offsets.size - 1)
        coef = np.zeros((G, mm))
        res = np.zeros((G, F.F_COLS), np.int64)
        R = np.zeros((G, mm * mm))
        t0 = time.perf_counter()
        # one group per slice when on several cores: their costs differ (full or incremental)
        parallel.over_range(lambda g0, g1: F.fit_jobs(table, self.max_features, coef, res, R, g0, g1), G,
                            G if parts > 1 else 1)
        seconds = time.perf_counter() - t0
        del keep
        out, full, incremental = [], 0, 0
        for t, (_, _, n, _, _, _) in enumerate(jobs):
            prefix, feat, incr, lo, hi = res[t].tolist()
            m = feat + 1 if n > 1 else 0
            # copies: a memo keeps its R for long, and a view would keep the whole batch's
            out.append((coef[t].copy(), prefix, feat, R[t, :m * m].reshape(m, m).copy(), bool(incr), lo, hi))
            if n > 1:
                incremental += bool(incr)
                full += not incr
        if full or incremental:
            self._count(full, incremental, seconds)
        return out

    def train(self, A: np.ndarray, b: np.ndarray, R_old: np.ndarray | None,
              A_delta: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(R, coef) of one group: full training when ``R_old`` is None, else incremental."""
        retry = self._retrying()
        backend = self.cpu if self.failed and not retry else self.trainer
        try:
            res = backend.train_full(A, b) if R_old is None else backend.train_incremental(R_old, A_delta, A, b)
            self._answered(retry)
        except Exception as exc:
            if backend is self.cpu:
                raise
            self._failed(exc)
            res = self.cpu.train_full(A, b) if R_old is None else self.cpu.train_incremental(R_old, A_delta, A, b)
        coef = np.asarray(res.coef, np.float64)
        if not _trusted(res.R, coef, A.shape[1]):  # never trust a device blindly: retrain on the host
            res = self.cpu.train_full(A, b)
            coef = res.coef
        self._count(R_old is None, R_old is not None, res.seconds, int(res.device_cycles))
        return np.asarray(res.R, np.float64), coef

    def _answered(self, retried: bool) -> None:
        if not retried:
            return
        with self._lock:  # batches in flight together retried together: one message
            first = self.failed
            self.failed = False
        if first:
            log.warning("training backend %s answers again; offloading training to it", self.name)

    def _failed(self, exc: Exception) -> None:
        """The trainer raised ``exc``: raised again unless it is an offload failure, which
        makes the store train in-process until the trainer is due to be tried again."""
        if not is_offload_failure(exc):
            raise exc
        with self._lock:  # batches in flight together fail together: one warning
            first = not self.failed
            self.failed = True
            self._failed_at = time.monotonic()
        if first:
            log.warning("training backend %s failed (%s); training in-process, retrying it every %g s",
                        self.name, exc, self.retry)

    def batched(self) -> bool:
        """Whether retrains go to the trainer many at a time now (its ``train_keys``)."""
        return hasattr(self.trainer, "train_keys") and (not self.failed or self._retrying())

    def train_keys(self, jobs: list[KeysJob]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """(R, coef) of each job from one ``train_keys`` call of the trainer; None for a job
        whose coefficients are not finite, and for all when the trainer failed (the caller
        then trains those in-process)."""
        retry = self._retrying()
        try:
            results = self.trainer.train_keys(jobs)
            self._answered(retry)
        except Exception as exc:
            self._failed(exc)
            return [None] * len(jobs)
        out = []
        for job, res in zip(jobs, results):
            coef = np.asarray(res.coef, np.float64)
            ok = _trusted(res.R, coef, job.feat + 1)  # else trained in-process by the caller
            if ok:
                self._count(job.R_old is None, job.R_old is not None, res.seconds, int(res.device_cycles))
            out.append((np.asarray(res.R, np.float64), coef) if ok else None)
        return out


_NO_R = np.zeros((0, 0))
_REFINE_STEPS = 8  # most steps of iterative refinement of a trainer's answer (fit_many); converged fits stop sooner


def _warm_batch_steps(max_features: int) -> None:
    """Compile (or load) the store's own steps of a batched trainer's batch now, at open, not
    in the first retrain, which a background thread would make while a writer waits for
    the GIL: the jobs' shapes, and the refinement and bounds of the answers (:func:`fit_many`)."""
    none, pairs, mm = np.zeros((0, F.J_COLS), np.int64), np.zeros((0, 2), np.int64), max_features + 1
    F.shape_jobs(none, max_features, pairs)
    F.bound_jobs(none, pairs, np.zeros((0, mm)), np.zeros((0, mm, mm)), _REFINE_STEPS, pairs)


def _trusted(R: np.ndarray, coef: np.ndarray, width: int) -> bool:
    """Whether a trainer's answer may be kept: coefficients and the R factor (memoized for
    the next incremental retrain) of the right shapes and finite.  An emulated FP32 device
    can lose a column to rounding and answer NaN in R while its coefficients stay finite."""
    R = np.asarray(R)
    return (coef.shape == (width,) and R.shape == (width, width)
            and bool(np.all(np.isfinite(coef))) and bool(np.all(np.isfinite(R))))


# ------------------------------------------------------------------ one group's retrain
@dataclass(eq=False)
class Job:
    """What a group's retrain reads, taken under the writer lock."""

    g: int
    grp: Group
    offs: np.ndarray
    kbytes: np.ndarray
    n: int
    memo: Memo | None
    deletes: int  #: the memo's lazy deletes then
    pending: list  #: the batches of keys written since the memo
    untrained: int


@dataclass(eq=False)
class Fit:
    coef: np.ndarray
    prefix: int
    feat: int
    R: np.ndarray | None
    incremental: bool
    bounds: tuple[int, int] | None = None  #: exact error bounds over the job's keys, if computed


def take_job(live: LiveIndex, g: int) -> Job | None:
    """The inputs of group ``g``'s retrain (writer lock held); None if it is gone."""
    grp = live.groups[g] if g < len(live.groups) else None
    if grp is None:
        return None
    memo = grp.memo
    return Job(g, grp, grp.offs, grp.kbytes, int(live.tab[g, L.T_N]), memo, memo.deletes if memo else 0,
               list(grp.pending), grp.untrained)


def _shapes(jobs: list[Job], opts: StoreOptions) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """A :func:`~learnedidx.index.fitting.fit_jobs` table of the jobs (groups of at least two
    keys), each one's prefix and feature length (one compiled call), and whether it may
    start from its memo (the same prefix and features, and few enough deletes since)."""
    table = np.zeros((len(jobs), F.J_COLS), np.int64)
    for t, job in enumerate(jobs):
        if job.offs.size < job.n + 1 or job.offs[0] < 0 or job.offs[job.n] > job.kbytes.size:
            raise LearnedIdxError("key offsets past the key bytes")  # read without bounds checks
        table[t, [F.J_KB, F.J_KBLEN, F.J_OFFS, F.J_N]] = (job.kbytes.ctypes.data, job.kbytes.size,
                                                          job.offs.ctypes.data, job.n)
    shapes = np.zeros((len(jobs), 2), np.int64)
    F.shape_jobs(table, opts.max_features, shapes)
    incremental = [job.memo is not None and job.memo.prefix == prefix and job.memo.feat == feat
                   and job.deletes <= opts.full_retrain_fraction * job.n
                   for job, (prefix, feat) in zip(jobs, shapes.tolist())]
    return table, shapes, incremental


def fit_local(jobs: list[Job], retrainer: Retrainer, opts: StoreOptions, parts: int = 1,
              in_process: bool = False) -> list[Fit] | None:
    """The groups' new models trained here, in compiled calls on up to ``parts`` cores
    (:meth:`Retrainer.fit_here`; no lock needed: key arrays never change); None unless
    training runs in-process on the cpu backend, or ``in_process``."""
    if not (in_process or retrainer.in_process()):
        return None
    specs = [(job.kbytes, job.offs, job.n, job.memo,
              job.memo is not None and job.deletes <= opts.full_retrain_fraction * job.n, job.pending)
             for job in jobs]
    outs = retrainer.fit_here(specs, parts)
    return [Fit(coef[:feat + 1], int(prefix), int(feat), R if job.n > 1 else None, bool(incremental),
                (int(lo), int(hi)))
            for job, (coef, prefix, feat, R, incremental, lo, hi) in zip(jobs, outs)]


def fit(job: Job, retrainer: Retrainer, opts: StoreOptions, in_process: bool = False) -> Fit:
    """The group's new model on the store's trainer (no lock needed: key arrays never
    change); ``in_process``: trained here whatever the store's trainer."""
    local = fit_local([job], retrainer, opts, 1, in_process)
    if local is not None:
        return local[0]
    n, offs, kb = job.n, job.offs, job.kbytes
    if n <= 1:
        return Fit(np.zeros(1), 0, 0, None, False)
    _, shapes, incr = _shapes([job], opts)
    (prefix, feat), incremental = shapes[0].tolist(), incr[0]
    A = K.build_features(kb, offs, 0, n, prefix, feat)
    b = np.arange(n, dtype=np.float64)
    if incremental:
        parts = [K.build_features(kb.arena, kb.offsets, 0, len(kb), prefix, feat) for kb in job.pending]
        A_delta = np.concatenate(parts) if parts else np.zeros((0, feat + 1))
        R, coef = retrainer.train(A, b, job.memo.R, A_delta)
    else:
        R, coef = retrainer.train(A, b, None, None)
    return Fit(np.asarray(coef[:feat + 1], np.float64), prefix, feat, R, incremental)


def fit_many(jobs: list[Job], retrainer: Retrainer, opts: StoreOptions) -> list[Fit]:
    """The new models of several groups: one ``train_keys`` call of the trainer for all of
    them (the keys travel, not feature rows); a job the trainer did not answer is trained
    in-process.  The store's own steps are one compiled call each for the whole batch: the
    jobs' shapes, and the answers refined with the trainer's factors (iterative refinement
    in float64, :func:`~learnedidx.index.fitting.refined_bounds`) with their exact error
    bounds."""
    sized = [job for job in jobs if job.n > 1]
    table, shapes, incr = _shapes(sized, opts)
    keyed = []
    for job, (prefix, feat), incremental in zip(sized, shapes.tolist(), incr):
        new = KeyBatch.joined([(b.arena, b.offsets) for b in job.pending]) if incremental else None
        keyed.append(KeysJob(job.kbytes, job.offs[:job.n + 1], prefix, feat, job.memo.R if incremental else None,
                             new.arena if new else None, new.offsets if new else None))
    results = retrainer.train_keys(keyed) if keyed else []
    mm = opts.max_features + 1
    coef, R = np.zeros((len(sized), mm)), np.zeros((len(sized), mm, mm))
    for t, res in enumerate(results):
        if res is not None:
            w = len(res[1])
            coef[t, :w], R[t, :w, :w] = res[1], res[0]
    bounds = np.zeros((len(sized), 2), np.int64)
    # The models refined with the trainer's factors (an FP32 device's fit is off by many
    # positions) and their exact bounds computed here, without the writer lock, for
    # publish to use while the groups still have these keys (never taken from the trainer).
    F.bound_jobs(table, shapes, coef, R, _REFINE_STEPS, bounds)
    answer = {id(job): t for t, job in enumerate(sized)}
    fits = []
    for job in jobs:
        t = answer.get(id(job))
        if t is None or results[t] is None:
            fits.append(fit(job, retrainer, opts, in_process=True))
        else:
            (prefix, feat), (lo, hi) = shapes[t].tolist(), bounds[t].tolist()
            fits.append(Fit(coef[t, :feat + 1].copy(), prefix, feat, results[t][0], incr[t], (lo, hi)))
    return fits


def publish(live: LiveIndex, job: Job, f: Fit) -> bool:
    """Install a retrained model (writer lock held); False if the group was replaced (split)
    meanwhile, when the job's result no longer fits it."""
    grp = live.groups[job.g] if job.g < len(live.groups) else None
    if grp is not job.grp:
        return False
    # The bounds the fit computed hold while the group still has the keys it was fitted on.
    live.publish_model(job.g, f.coef, f.prefix, f.feat, f.bounds if grp.offs is job.offs else None)
    if grp.memo is job.memo:  # else another retrain published since: its memo stays
        later = grp.memo.deletes - job.deletes if grp.memo is not None else 0  # deleted while it trained
        grp.memo = Memo(f.R, f.prefix, f.feat, (job.deletes if f.incremental else 0) + later) if f.R is not None else None
        del grp.pending[:len(job.pending)]
    grp.untrained -= job.untrained
    return True


# ------------------------------------------------------------------ groups due for retraining
#: Most groups retrained together: by a trainer that takes batches (one request to the
#: server), or in-process (one compiled call, one wait for the GIL).
BATCH_GROUPS = 64


class RetrainQueue:
    """The groups due for a retrain and who trains them: the writer at once (``inline``),
    a background thread (``background``), or nobody until :meth:`drain` (``off``).

    The *backlog* is the number of keys written since their group's model was trained.
    Past ``max_backlog`` (background mode), writers wait for the background thread to
    bring it back under half of that (a stall, counted in :attr:`stats`), as a database
    stalls writes when compaction falls behind."""

    def __init__(self, live: LiveIndex, lock: threading.Lock, retrainer: Retrainer, opts: StoreOptions) -> None:
        self.live = live
        self.lock = lock  # the store's writer lock
        self.retrainer = retrainer
        self.opts = opts
        self.mode = opts.retrain
        self.limit = opts.max_backlog
        self.due: dict[int, None] = {}  # insertion-ordered set of group ids
        self.ripe: dict[int, None] = {}  # the due groups the background thread retrains now
        self.backlog = 0
        self._cv = threading.Condition(threading.Lock())  # due, backlog and waiters
        self._training = threading.Lock()  # one retrain at a time per store
        self._stop = False
        self._waiting = 0  # writers waiting for the backlog
        self._draining = 0  # callers of drain(): the background thread yields to them
        self.stats = {"stalls": 0, "stall_seconds": 0.0}
        self._thread: threading.Thread | None = None
        if self.mode == "background":
            self._thread = threading.Thread(target=self._run, name="learnedidx-retrainer", daemon=True)
            self._thread.start()

    def add(self, gids: list[int], written: int) -> None:
        """Groups whose keys changed by ``written`` keys (writer lock held)."""
        with self._cv:
            woke = False
            for g in gids:
                self.due[g] = None
                if g not in self.ripe and self._ripe(g):
                    self.ripe[g] = None
                    woke = True
            self.backlog += written
            # Only what the background thread acts on wakes it: each wake costs the writer
            # the GIL for a moment.
            if woke:
                self._cv.notify_all()

    def _ripe(self, g: int) -> bool:
        """Whether group g took ``retrain_after`` times the keys its model was trained on
        since (writer lock held)."""
        grp = self.live.groups[g]
        return grp is None or grp.untrained >= self.opts.retrain_after * max(int(self.live.tab[g, L.T_N]) - grp.untrained, 1)

    def after_fold(self) -> None:
        """Called by a writer after a fold-in, with the writer lock held: an inline store
        retrains now."""
        if self.mode == "inline":
            self._train_due(locked=True, parts=parallel.CORES)

    def must_wait(self) -> bool:
        return self.mode == "background" and self.backlog > self.limit

    def wait(self) -> None:
        """Stall a writer (writer lock not held) until the backlog is under half the limit."""
        t0 = time.perf_counter()
        with self._cv:
            self._waiting += 1  # the background thread now retrains unripe groups too
            self._cv.notify_all()
            try:
                while self.backlog > self.limit // 2 and not self._stop and self.due:
                    self._cv.wait(0.1)
            finally:
                self._waiting -= 1
        self.stats["stalls"] += 1
        self.stats["stall_seconds"] += time.perf_counter() - t0

    def _pop(self, most: int, ripe: bool, busy: set[int] | frozenset = frozenset()) -> list[int]:
        """Up to ``most`` due groups (``ripe`` ones only, unless writers wait for the
        backlog), no longer due; none of ``busy`` (groups whose job is in flight)."""
        with self._cv:
            pool = self.ripe if ripe and not self._waiting else self.due
            gs = list(itertools.islice((g for g in pool if g not in busy) if busy else pool, most))
            for g in gs:
                del self.due[g]
                self.ripe.pop(g, None)
            return gs

    def _held(self, locked: bool):
        """The writer lock, unless the caller holds it already."""
        return contextlib.nullcontext() if locked else self.lock

    def _take(self, gs: list[int], locked: bool) -> list[Job]:
        """The retrain jobs of groups ``gs`` (those still there), taken under the writer lock."""
        with self._held(locked):
            return [job for g in gs if (job := take_job(self.live, g)) is not None]

    def _fit(self, jobs: list[Job], parts: int) -> list[Fit]:
        """The jobs' fits, without the writer lock: many at once when the trainer takes
        batches or trains in-process (on up to ``parts`` cores)."""
        if self.retrainer.batched():
            return fit_many(jobs, self.retrainer, self.opts)
        fits = fit_local(jobs, self.retrainer, self.opts, parts)
        if fits is None:  # a trainer of its own, group by group
            fits = [fit(job, self.retrainer, self.opts) for job in jobs]
        return fits

    def _publish(self, jobs: list[Job], fits: list[Fit], locked: bool) -> None:
        """Install the fits, each under the writer lock, and take their keys off the backlog."""
        done = 0
        for job, f in zip(jobs, fits):
            with self._held(locked):
                if publish(self.live, job, f):  # else the group was split: its pieces are due and hold its backlog
                    done += job.untrained
        with self._cv:
            self.backlog -= done
            self._cv.notify_all()

    def _undue(self, gs: list[int], ripe: bool) -> None:
        """Groups ``gs`` were not trained: due again."""
        with self._cv:
            for g in gs:
                self.due[g] = None
                if ripe:
                    self.ripe[g] = None

    def _train_due(self, locked: bool, parts: int = 1, ripe: bool = False, yields: bool = False) -> None:
        """Train every due group (every ripe one), on up to ``parts`` cores; ``locked``: the
        caller holds the writer lock (which then serializes retrains: taking ``_training``
        after it would invert the lock order of the unlocked retrains, which take it before);
        ``yields``: stop after the batch in hand when a drain is waiting to train on every
        core (the background thread trains on one)."""
        with contextlib.nullcontext() if locked else self._training:
            if parts > 1 and self.retrainer.batched():
                return self._train_pipelined(locked, parts, ripe)
            while not (yields and self._draining) and (
                    gs := self._pop(BATCH_GROUPS if self.retrainer.batched() or self.retrainer.in_process() else 1, ripe)):
                try:
                    self._publish(jobs := self._take(gs, locked), self._fit(jobs, parts), locked)
                except BaseException:
                    self._undue(gs, ripe)
                    raise

    def _train_pipelined(self, locked: bool, parts: int, ripe: bool) -> None:
        """:meth:`_train_due` for a caller that waits, with a trainer that takes batches:
        ``parts`` batches in flight, so that one batch's requests, key trimming and error
        bounds overlap another's training on the server; published in order, here.  A group
        has one job in flight at most: a second one, taken before the first is published,
        would count the first one's keys as trained again."""
        flight: collections.deque = collections.deque()
        busy: set[int] = set()  # a group written to again while its job is in flight waits for it
        with ThreadPoolExecutor(parts, thread_name_prefix="learnedidx-drain") as pool:
            try:
                while True:
                    gs = self._pop(BATCH_GROUPS, ripe, busy) if len(flight) < parts else []
                    if gs:
                        busy.update(gs)
                        flight.append((gs, None, None))  # popped: due again if anything fails from here
                        jobs = self._take(gs, locked)
                        flight[-1] = (gs, jobs, pool.submit(self._fit, jobs, 1))
                        continue
                    if not flight:
                        return
                    gs, jobs, fits = flight[0]
                    self._publish(jobs, fits.result(), locked)
                    flight.popleft()
                    busy.difference_update(gs)
            except BaseException:
                for held, _, _ in flight:
                    self._undue(held, ripe)
                raise

    def drain(self, locked: bool = False) -> None:
        """Retrain every due group now, in the calling thread and on every core (the
        caller waits for it)."""
        with self._cv:
            self._draining += 1
        try:
            self._train_due(locked, parallel.CORES)
        finally:
            with self._cv:
                self._draining -= 1

    def _run(self) -> None:
        while True:
            with self._cv:
                while not (self.ripe or self._stop or (self.due and self._waiting)):
                    self._cv.wait()
                if self._stop:
                    return
            try:
                self._train_due(locked=False, ripe=True, yields=True)
            except Exception:  # keep serving; the group stays due and the next round retries
                log.exception("background retrain failed")
                time.sleep(self.opts.retrain_interval)

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

