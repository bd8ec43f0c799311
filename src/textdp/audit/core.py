"""The neighbouring-dataset sanity check (Habernal, ACL 2022, Sec. 4), with confidence bounds.

Setting: one record is a vector in ``[0,1]^n``; the neighbouring single-record datasets
are ``D = 0^n`` and ``D' = 1^n``. The mechanism privatizes ``N`` records of each (rows of
an ``(N, n)`` float64 array), in streamed chunks on all cores, each chunk with its own
generator spawned from one seed sequence (:meth:`textdp.noise.SimulationSource.spawn`), so the
result depends on the seed and the chunk size, never on the number of workers.

Randomness: an audit's noise is a simulation, not a release (only counts of the fixed records
``0^n`` and ``1^n`` come out), so it is drawn from the fast non-cryptographic ``PCG64DXSM``
generator of :func:`textdp.noise.simulation_rng`, seeded from the OS's CSPRNG or from ``seed``;
the audit's output says so (:func:`simulation_statement`).

Attack 1 (the paper's): threshold each output coordinate at 0.5 (``< 0.5`` → 0, else 1),
majority vote over the ``n`` bits; **tie rule**: a 50/50 tie (even ``n``) answers 0 (numpy's
round-half-to-even of the mean, as in the official code). Counts are per record (the
official code counts per coordinate, i.e. ``n`` times as much; ratios are unchanged).
``ε̂ = max_y |ln P̂(D|y) − ln P̂(D'|y)|`` (equal sample sizes: posterior ratio = likelihood
ratio), with the exact simultaneous bounds of :func:`textdp.audit.stats.empirical_epsilon_lower_bound`.

Attack 2 (stronger, data-driven, in the spirit of DP-Sniper, Bichsel et al. 2021): a
scalar statistic per record, ``bits`` = number of coordinates ``>= 0.5`` (default; also
available on the fast path) or ``clipped-mean`` = mean of ``clip(y, 0, 1)`` in 1000 bins
(the likelihood-ratio statistic of Laplace noise on these datasets; full-noise path only).
A threshold event ``{s <= t}`` or ``{s >= t}`` is chosen on an independent *selection*
sample (``selection_fraction · N`` extra records per dataset), and bounded on the main
sample (:func:`textdp.audit.stats.selected_event_bound`).

Each attack's verdict is at level ``1 − α`` on its own: violation iff its ``ε_lo`` exceeds
the claimed ε (either of the two: level ``1 − 2α`` by Bonferroni). The check can refute a
DP claim; it can never certify one.

Samplers: ``"full"`` (default) runs the real mechanism on real arrays. ``"sufficient-statistic"``
(zoo mechanisms only, ``statistic="bits"``): because their coordinates are independent, the
histogram of the bit count over ``N`` records is exactly ``Multinomial(N, Binomial(n, p).pmf)``
with ``p`` from ``bit_probability``; one draw replaces ``N·n`` noise samples
(``tests/audit/test_fastpath.py`` checks it against the full path). ``"auto"`` picks it when
available.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from textdp.audit.oracle import binom_pmf, zoo_oracle
from textdp.audit.stats import EpsilonBound, SelectedEvent, check_alpha, empirical_epsilon_lower_bound, selected_event_bound
from textdp.errors import ParameterError
from textdp.mechanisms.zoo import BACKEND_ENV, NUMPY_ELEMENT_BUDGET, ZOO, ZooMechanism, make_zoo_mechanism, use_numpy_backend
from textdp.noise import random_source, simulation_source
from textdp.noise.simulation import SIMULATION_GENERATOR

__all__ = [
    "AuditResult",
    "Mechanism",
    "audit_mechanism",
    "audit_dims",
    "resolve_mechanism",
    "load_user_mechanism",
    "format_epsilon",
    "STATISTICS",
    "SAMPLERS",
    "simulation_statement",
]

STATISTICS = ("bits", "clipped-mean")
SAMPLERS = ("full", "sufficient-statistic", "auto")
CLIPPED_BINS = 1000
DEFAULT_CHUNK_ELEMENTS = 1 << 21  # floats per block: one generator stream per block
INNER_ELEMENTS = 1 << 16  # floats per mechanism call inside a block (512 KiB arrays: cache-sized)


def format_epsilon(value: float, ceiling: float | None = None) -> str:
    """``0.8325``, or ``> 16.1`` for an infinite plug-in estimate (above the sample's ceiling)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if math.isinf(value):
        return f"> {ceiling:.1f}" if ceiling is not None else "inf"
    return f"{value:.4f}"


@dataclass
class Mechanism:
    """A mechanism prepared for auditing: ``call(x, rng) -> y`` on ``(N, n)`` float64 records.

    name: label for reports; zoo: the :class:`ZooMechanism` when it is one (enables the
    oracle and the fast path); guarantee: the claimed guarantee as a dict, when known.
    """

    name: str
    call: Callable[[np.ndarray, np.random.Generator], Any]
    zoo: ZooMechanism | None = None
    guarantee: dict | None = None
    broken: bool | None = None


def _import_callable(spec: str) -> Callable:
    mod_name, _, attr = spec.rpartition(":")
    if not mod_name or not attr:
        raise ParameterError(f"--mechanism {spec!r}: expected package.module:function or path/to/file.py:function")
    try:
        if mod_name.endswith(".py") or os.sep in mod_name:
            path = Path(mod_name)
            if not path.is_file():
                raise ParameterError(f"--mechanism {spec!r}: file {mod_name!r} does not exist")
            mspec = importlib.util.spec_from_file_location(f"_textdp_user_mech_{path.stem}", path)
            module = importlib.util.module_from_spec(mspec)
            mspec.loader.exec_module(module)
        else:
            try:
                module = importlib.import_module(mod_name)
            except ModuleNotFoundError as exc:
                if exc.name != mod_name.split(".")[0] or os.getcwd() in sys.path:
                    raise
                sys.path.insert(0, os.getcwd())  # console scripts do not search the working directory
                try:
                    module = importlib.import_module(mod_name)
                finally:
                    sys.path.remove(os.getcwd())
    except ParameterError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and not mod_name.startswith(exc.name):
            raise ParameterError(f"--mechanism {spec!r}: importing {mod_name!r} failed: {exc}") from None
        raise ParameterError(
            f"--mechanism {spec!r}: cannot import module {mod_name!r} ({exc}); check the name and that it is "
            f"on PYTHONPATH or in the current directory"
        ) from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user code failing (or exiting) at import time
        raise ParameterError(f"--mechanism {spec!r}: importing {mod_name!r} failed: {type(exc).__name__}: {exc}") from None
    try:
        fn = getattr(module, attr)
    except AttributeError:
        raise ParameterError(f"--mechanism {spec!r}: module {mod_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise ParameterError(f"--mechanism {spec!r}: {attr!r} is not callable; it must take (records, rng) and return records")
    return fn


def resolve_mechanism(mechanism: Any, epsilon: float, n: int) -> Mechanism:
    """Turn what the user named into a :class:`Mechanism` for dimension ``n``.

    mechanism: a zoo name (``"laplace"``, ``"adept"``, ``"dptext"``, ``"copy"``, ``"random"``,
    ``"wrong-sensitivity"``, or ``"audit.<name>"``), another registered mechanism name with
    an audit adapter, ``"package.module:function"`` / ``"file.py:function"``, a
    :class:`ZooMechanism`, or any callable ``f(x, rng) -> y`` with ``x`` an ``(N, n)`` float64
    array and ``y`` of the same shape.

    Raises :class:`ParameterError` for unknown names and import failures.
    """
    if isinstance(mechanism, Mechanism):
        return mechanism
    if isinstance(mechanism, ZooMechanism):
        if mechanism.n != n:
            raise ParameterError(f"mechanism {mechanism.name!r} was built for n={mechanism.n}, audited at n={n}")
        return Mechanism(mechanism.name, mechanism, zoo=mechanism, guarantee=mechanism.guarantee.to_dict(),
                         broken=mechanism.broken)
    if isinstance(mechanism, str):
        key = mechanism[len("audit."):] if mechanism.startswith("audit.") else mechanism
        if key in ZOO:
            m = make_zoo_mechanism(key, epsilon, n)
            return Mechanism(m.name, m, zoo=m, guarantee=m.guarantee.to_dict(), broken=m.broken)
        if ":" in mechanism:
            return load_user_mechanism(mechanism)
        from textdp.mechanisms.registry import registry

        reg = registry()
        if mechanism in reg:
            info = reg[mechanism]
            adapter = getattr(info.factory, "audit_adapter", None)
            if adapter is None:
                hint = ("wrap a fitted sanitizer in textdp.audit.adapters.TokenPairAdapter(mech, word_a, word_b) "
                        "in a file and pass --mechanism file.py:name (docs/audit.md)"
                        if info.capability == "sanitize" else
                        "audit its outputs with textdp.audit.empirical_epsilon_lower_bound")
                raise ParameterError(
                    f"mechanism {mechanism!r} ({info.capability}) needs setup before it can take [0,1]^n records: "
                    f"{hint}"
                )
            return Mechanism(mechanism, adapter(epsilon=epsilon, n=n), broken=info.broken)
        known = ", ".join(list(ZOO))
        raise ParameterError(f"unknown mechanism {mechanism!r}; use one of {known}, or package.module:function")
    if callable(mechanism):
        return _from_callable(mechanism, getattr(mechanism, "__name__", type(mechanism).__name__))
    raise ParameterError(f"mechanism must be a name or a callable (records, rng) -> records, got {type(mechanism).__name__}")


def load_user_mechanism(spec: str) -> Mechanism:
    """Import ``package.module:function`` or ``path/file.py:function`` once, as a :class:`Mechanism`
    named ``spec``. Raises :class:`ParameterError` with the reason when it cannot be imported."""
    return _from_callable(_import_callable(spec), spec)


def _from_callable(fn: Callable, name: str) -> Mechanism:
    g = getattr(fn, "guarantee", None)
    gd = g.to_dict() if hasattr(g, "to_dict") else None
    return Mechanism(name, fn, guarantee=gd, broken=getattr(fn, "broken", None))


def _claimed_epsilon(obj: Any, n: int) -> float:
    """The claimed ε per record of an object: ``obj.claimed_epsilon(n)`` (adapters), else
    ``obj.guarantee.epsilon`` (pure/local DP); ParameterError when it states none."""
    if isinstance(obj, Mechanism):
        obj = obj.zoo if obj.zoo is not None else obj.call
    if hasattr(obj, "claimed_epsilon"):
        return float(obj.claimed_epsilon(n))
    eps = getattr(getattr(obj, "guarantee", None), "epsilon", None)
    if eps is None:
        raise ParameterError("give the claimed epsilon (the mechanism does not state one)")
    return float(eps)


def simulation_statement(seed: int | None) -> str:
    """How an audit's noise is drawn, for its output: the non-cryptographic simulation generator
    (:func:`textdp.noise.simulation_rng`) and its seeding; an audit's noise is not a release."""
    how = f"seed {seed}" if seed is not None else "seeded from the OS's CSPRNG"
    return f"{SIMULATION_GENERATOR} (non-cryptographic, {how}; audit noise is not a release)"


def _nan_error(name: str, bad: int, size: int) -> ParameterError:
    return ParameterError(
        f"mechanism {name!r} returned NaN in {bad} of {size} values; a mechanism must "
        f"define every output (fix the sampler, e.g. an inverse CDF outside its domain)"
    )


def _check_output(y: Any, size: int, n: int, name: str, check_nan: bool = True) -> np.ndarray:
    try:
        y = np.asarray(y)
    except Exception as exc:  # noqa: BLE001
        raise ParameterError(f"mechanism {name!r} returned something that is not an array: {exc}") from None
    if y.shape != (size, n):
        raise ParameterError(
            f"mechanism {name!r} returned shape {y.shape} for input shape {(size, n)}; it must return one "
            f"privatized record per input row, same shape"
        )
    if y.dtype == bool:
        y = y.astype(np.float64)
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise ParameterError(f"mechanism {name!r} returned dtype {y.dtype}; it must return real numbers")
    if check_nan and np.issubdtype(y.dtype, np.floating):
        bad = np.isnan(y)
        if bad.any():
            raise _nan_error(name, int(bad.sum()), y.size)
    return y


def _call(mech: Mechanism, x: np.ndarray, rng: np.random.Generator, check_nan: bool = True) -> np.ndarray:
    try:
        y = mech.call(x, rng)
    except ParameterError:
        raise
    except Exception as exc:  # noqa: BLE001 - user mechanism failed
        raise ParameterError(
            f"mechanism {mech.name!r} failed on input shape {x.shape}: {type(exc).__name__}: {exc}"
        ) from None
    except SystemExit as exc:  # user code calling sys.exit() must not end the audit silently
        raise ParameterError(
            f"mechanism {mech.name!r} called sys.exit({exc.code!r}) on input shape {x.shape}; a mechanism must "
            f"return its records, not exit"
        ) from None
    return _check_output(y, x.shape[0], x.shape[1], mech.name, check_nan)


def _task_stats(mech: Mechanism, n: int, value: float, size: int, rng: np.random.Generator, statistic: str,
                inner_elements: int = INNER_ELEMENTS):
    """Histograms of one block of ``size`` records on the constant input ``value``.

    The block's generator is used for sub-chunks of about ``inner_elements`` floats, so the
    arrays stay cache-sized while generator streams stay few (one per block). Each sub-chunk's
    statistics (and its NaN check) are one numba pass (:mod:`textdp.audit._kernels`), or numpy
    passes for a short audit (:func:`textdp.mechanisms.zoo.use_numpy_backend`)."""
    h_bits = np.zeros(n + 1, np.int64)
    h_clip = np.zeros(CLIPPED_BINS, np.int64) if statistic == "clipped-mean" else None
    step = max(1, inner_elements // n)
    x_full = np.zeros((min(step, size), n)) if value == 0.0 else np.ones((min(step, size), n))
    # the built-in zoo's mechanisms never write into their input (tests/audit/test_simulation_rng.py): they
    # get a view; any other mechanism gets a fresh copy of the records at every call
    # (restored from x_full into one buffer per block: a fresh 512 KiB array per call would page-fault)
    fresh = mech.zoo is None or type(mech.zoo) not in ZOO.values()
    x_buf = np.empty_like(x_full) if fresh else None
    done = 0
    while done < size:
        m = min(step, size - done)
        if fresh:  # a mechanism may write into its input
            x = x_buf[:m]
            np.copyto(x, x_full[:m])
        else:
            x = x_full[:m]
        y = np.ascontiguousarray(_call(mech, x, rng, check_nan=False), dtype=np.float64)
        bad = _histograms(y, h_bits, h_clip)
        if bad:
            raise _nan_error(mech.name, int(bad), y.size)
        done += m
    return h_bits, h_clip


def _histograms(y: np.ndarray, h_bits: np.ndarray, h_clip: np.ndarray | None) -> int:
    """Add the records of ``y`` (m, n) float64 to the bit-count histogram ``h_bits`` and the
    clipped-mean histogram ``h_clip`` (None: not asked); return the number of NaN values."""
    if not use_numpy_backend("statistics", y.size, "textdp.audit._kernels"):
        from textdp.audit._kernels import bit_and_clipped_histograms, bit_histogram

        return bit_histogram(y, h_bits) if h_clip is None else bit_and_clipped_histograms(y, h_bits, h_clip)
    bad = int(np.count_nonzero(np.isnan(y)))
    if bad:
        return bad
    h_bits += np.bincount(np.count_nonzero(y >= 0.5, axis=1), minlength=h_bits.size)
    if h_clip is not None:
        t = np.clip(y, 0.0, 1.0).mean(axis=1)
        h_clip += np.bincount(np.minimum((t * h_clip.size).astype(np.int64), h_clip.size - 1), minlength=h_clip.size)
    return 0


@dataclass
class AuditResult:
    """Result of one audit cell (one mechanism, claimed ε, dimension n).

    majority: the paper's attack (:class:`~textdp.audit.stats.EpsilonBound`); counts_D /
    counts_D2: its 2×2 table (records answered 0 and 1); strong: the data-driven threshold
    attack (:class:`~textdp.audit.stats.SelectedEvent`) or None; oracle: the exact
    majority-vote ε (zoo mechanisms) or None. ``epsilon`` is the claimed ε per record.
    """

    mechanism: str
    epsilon: float
    n: int
    samples: int
    selection_samples: int
    alpha: float
    sampler: str
    statistic: str
    majority: EpsilonBound
    counts_D: tuple[int, int]
    counts_D2: tuple[int, int]
    strong: SelectedEvent | None = None
    oracle: float | None = None
    broken: bool | None = None
    guarantee: dict | None = None
    seed: dict = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def epsilon_hat(self) -> float:
        return self.majority.epsilon_hat

    @property
    def epsilon_lower(self) -> float:
        return self.majority.epsilon_lower

    @property
    def epsilon_upper(self) -> float:
        return self.majority.epsilon_upper

    @property
    def ceiling(self) -> float:
        return self.majority.ceiling

    @property
    def violation(self) -> bool:
        """Majority-vote verdict at level ``1 − alpha``: ``epsilon_lower > epsilon``."""
        return self.majority.epsilon_lower > self.epsilon

    @property
    def strong_violation(self) -> bool:
        return self.strong is not None and self.strong.epsilon_lower > self.epsilon

    @property
    def any_violation(self) -> bool:
        """Either attack refutes the claim (joint level ``1 − 2·alpha``)."""
        return self.violation or self.strong_violation

    def to_dict(self) -> dict:
        """Flat, JSON-ready record (infinities as ``float('inf')``; json writes ``Infinity``)."""
        d = {
            "mechanism": self.mechanism, "epsilon": self.epsilon, "n": self.n, "samples": self.samples,
            "alpha": self.alpha, "sampler": self.sampler,
            "epsilon_hat": self.epsilon_hat, "epsilon_lower": self.epsilon_lower,
            "epsilon_upper": self.epsilon_upper, "ceiling": self.ceiling,
            "lower_ceiling": self.majority.lower_ceiling, "oracle": self.oracle,
            "violation": self.violation,
            "counts_D": list(self.counts_D), "counts_D2": list(self.counts_D2),
            "strong_statistic": self.statistic if self.strong else None,
            "selection_samples": self.selection_samples,
            "strong_event": (self.strong.event.replace("t", str(self.strong.threshold)) + f" ({self.strong.direction})")
            if self.strong else None,
            "strong_epsilon_hat": self.strong.epsilon_hat if self.strong else None,
            "strong_epsilon_lower": self.strong.epsilon_lower if self.strong else None,
            "strong_violation": self.strong_violation if self.strong else None,
            "broken": self.broken, "guarantee": self.guarantee, "seed": self.seed,
            "simulation_rng": simulation_statement(self.seed.get("seed")) if self.seed else None,
            "wall_s": round(self.wall_s, 3),
            "method": self.majority.method,
        }
        return d


def _plan(total: int, n: int, chunk_elements: int) -> list[int]:
    per = max(1, chunk_elements // n)
    sizes = [per] * (total // per)
    if total % per:
        sizes.append(total % per)
    return sizes


def _as_count(value, name: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a positive integer, got {value!r}") from None
    if not math.isfinite(f) or f < 1 or f != int(f):
        raise ParameterError(f"{name} must be a positive integer, got {value!r}")
    return int(f)


def audit_mechanism(
    mechanism: Any,
    epsilon: float | None = None,
    n: int = 1,
    samples: int = 10**6,
    alpha: float = 0.05,
    seed: int | None = None,
    *,
    strong: bool = True,
    statistic: str = "bits",
    selection_fraction: float = 0.1,
    sampler: str = "full",
    workers: int | None = None,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
    progress: Callable[[int], None] | None = None,
) -> AuditResult:
    """Audit one mechanism at one dimension: the Habernal (2022) sanity check with exact bounds.

    mechanism: see :func:`resolve_mechanism` (a zoo name, ``"pkg.mod:func"``, or a callable
      ``f(x, rng) -> y`` on ``(N, n)`` float64 arrays).
    epsilon: the claimed ε per record (replace-one); None takes it from
      ``mechanism.claimed_epsilon(n)`` (e.g. :class:`textdp.audit.adapters.TokenPairAdapter`) or
      ``mechanism.guarantee.epsilon``.
    n: record dimension (>= 1). samples: records per dataset ``N`` (>= 1).
    alpha: ``1 − alpha`` confidence of each attack's bound. seed: int for a reproducible run;
      None seeds the simulation generator (``PCG64DXSM``, non-cryptographic:
      :func:`textdp.noise.simulation_rng`) from the OS's CSPRNG. The mechanism is called with
      generators of that kind; ``result.seed`` records which.
    strong: also run the data-driven threshold attack on ``statistic`` (``"bits"`` or
      ``"clipped-mean"``) with ``ceil(selection_fraction · N)`` extra selection records.
    sampler: ``"full"`` (real arrays, default), ``"sufficient-statistic"`` (zoo only, exact
      Binomial/Multinomial shortcut), or ``"auto"``.
    workers: threads (default: all cores); chunk_elements: floats per block (one generator
      stream each; the mechanism is called on sub-chunks of ``INNER_ELEMENTS`` = 65536 floats,
      so memory is a few MiB per worker whatever ``N`` and ``n``). progress: called with the number of
      records just finished.

    Returns an :class:`AuditResult` (``.epsilon_hat``, ``.epsilon_lower``, ``.violation`` ...).
    Raises :class:`ParameterError` for bad parameters, an unknown or unimportable mechanism,
    or a mechanism that fails, returns the wrong shape, a non-numeric array or NaN.
    """
    t0 = time.perf_counter()
    n = _as_count(n, "dimension n")
    samples = _as_count(samples, "samples")
    alpha = check_alpha(alpha)
    if statistic not in STATISTICS:
        raise ParameterError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    if sampler not in SAMPLERS:
        raise ParameterError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    if not (0 < float(selection_fraction) <= 10):
        raise ParameterError(f"selection_fraction must be in (0, 10], got {selection_fraction!r}")
    if epsilon is None:
        if isinstance(mechanism, str):
            if ":" not in mechanism:
                raise ParameterError("give the claimed epsilon for a built-in mechanism")
            mechanism = _import_callable(mechanism)
        epsilon = _claimed_epsilon(mechanism, n)
    try:
        epsilon = float(epsilon)
    except (TypeError, ValueError):
        raise ParameterError(f"epsilon must be a number, got {epsilon!r}") from None
    if not (epsilon > 0) or math.isinf(epsilon):
        raise ParameterError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if workers is None:
        workers = os.cpu_count() or 1
    workers = _as_count(workers, "workers")
    chunk_elements = _as_count(chunk_elements, "chunk_elements")

    mech = resolve_mechanism(mechanism, epsilon, n)
    has_bits = mech.zoo is not None and mech.zoo.bit_probability(0.0) is not None
    fast_ok = has_bits and statistic == "bits"
    if sampler == "sufficient-statistic" and not fast_ok:
        raise ParameterError(
            "the sufficient-statistic sampler needs a built-in zoo mechanism and statistic='bits'; use sampler='full' (CLI: --full-noise)"
        )
    use_fast = sampler == "sufficient-statistic" or (sampler == "auto" and fast_ok)
    n_sel = max(1, math.ceil(selection_fraction * samples)) if strong else 0

    src = simulation_source(seed)  # PCG64DXSM: audit noise is a simulation, never a release
    parts = [("eval", 0.0, samples), ("eval", 1.0, samples)]
    if strong:
        parts += [("sel", 0.0, n_sel), ("sel", 1.0, n_sel)]
    hists: dict[tuple[str, float], list] = {(p, v): [np.zeros(n + 1, np.int64), None] for p, v, _ in parts}
    if statistic == "clipped-mean":
        for key in hists:
            hists[key][1] = np.zeros(CLIPPED_BINS, np.int64)

    if use_fast:
        gens = src.spawn(len(parts))
        k = np.arange(n + 1)
        for (p, v, total), g in zip(parts, gens):
            pmf = binom_pmf(k, n, mech.zoo.bit_probability(v))  # scipy.stats' values, without its import
            pmf = pmf / pmf.sum()
            hists[(p, v)][0] = g.multinomial(total, pmf).astype(np.int64)
            if progress:
                progress(total)
        sampler_used = "sufficient-statistic"
    else:
        if (os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto") == "auto" and \
                sum(total for _, _, total in parts) * n > NUMPY_ELEMENT_BUDGET:
            # a long audit loads the numba kernels at once instead of spending its first values on numpy
            import textdp.audit._kernels  # noqa: F401
            if mech.zoo is not None:
                import textdp.mechanisms._zoo_kernels  # noqa: F401
        tasks = [(p, v, size) for p, v, total in parts for size in _plan(total, n, chunk_elements)]
        gens = src.spawn(len(tasks) + 1)
        # probe: fail fast with a clear message before any threads start
        _call(mech, np.zeros((min(8, samples), n)), gens[-1])

        def run(i):
            p, v, size = tasks[i]
            return i, _task_stats(mech, n, v, size, gens[i], statistic)

        def collect(i, res):
            p, v, size = tasks[i]
            hb, hc = res
            hists[(p, v)][0] += hb
            if hc is not None:
                hists[(p, v)][1] += hc
            if progress:
                progress(size)

        if workers == 1 or len(tasks) == 1:
            for i in range(len(tasks)):
                collect(*run(i))
        else:
            with ThreadPoolExecutor(max_workers=workers) as ex:
                # bounded in-flight window keeps memory at ~workers chunks
                pending = []
                it = iter(range(len(tasks)))
                for i in it:
                    pending.append(ex.submit(run, i))
                    if len(pending) >= 2 * workers:
                        collect(*pending.pop(0).result())
                for f in pending:
                    collect(*f.result())
        sampler_used = "full"

    def majority_counts(h):
        half = n // 2  # y = 1 iff bits > n/2; a tie (bits == n/2) answers 0
        return int(h[: half + 1].sum()), int(h[half + 1:].sum())

    cD = majority_counts(hists[("eval", 0.0)][0])
    cD2 = majority_counts(hists[("eval", 1.0)][0])
    bound = empirical_epsilon_lower_bound(np.array(cD), np.array(cD2), alpha)
    sel = None
    if strong:
        j = 0 if statistic == "bits" else 1
        sel = selected_event_bound(hists[("sel", 0.0)][j], hists[("sel", 1.0)][j],
                                   hists[("eval", 0.0)][j], hists[("eval", 1.0)][j], alpha)
    oracle = zoo_oracle(mech.zoo.name, epsilon, n) if has_bits else None
    return AuditResult(
        mechanism=mech.name, epsilon=epsilon, n=n, samples=samples, selection_samples=n_sel, alpha=alpha,
        sampler=sampler_used, statistic=statistic, majority=bound, counts_D=cD, counts_D2=cD2, strong=sel,
        oracle=oracle, broken=mech.broken, guarantee=mech.guarantee, seed=src.describe(),
        wall_s=time.perf_counter() - t0,
    )


def audit_dims(mechanism: Any, epsilon: float, dims, samples: int = 10**6, **kwargs) -> list[AuditResult]:
    """:func:`audit_mechanism` for each dimension in ``dims`` (same keyword arguments).

    With an integer ``seed``, each cell gets an independent child seed
    (``SeedSequence(seed).spawn``), so cells never share noise.
    """
    dims = list(dims)
    if not dims:
        raise ParameterError("give at least one dimension")
    seed = kwargs.pop("seed", None)
    seeds = _cell_seeds(seed, len(dims))
    return [audit_mechanism(mechanism, epsilon, d, samples, seed=s, **kwargs) for d, s in zip(dims, seeds)]


def _cell_seeds(seed: int | None, k: int) -> list[int | None]:
    """Independent integer seeds for ``k`` cells derived from one seed (None stays None)."""
    if seed is None:
        return [None] * k
    src = random_source(seed)
    return [int(c.generate_state(1, np.uint64)[0] >> np.uint64(1)) for c in src.seed_sequence.spawn(k)]
