"""What a search optimizes and under which limits: ``evaluation``, ``optimization`` and ``optimizer``."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from simmodel.config.load import _Node, parse_evaluation
from simmodel.config.schema import DEFAULT_ATTAINMENT, Sla
from simmodel.errors import ScenarioError

TARGETS = {
    # target: (metric, higher is better)
    "throughput": ("output_throughput_tok_s", True),
    "throughput_per_gpu": ("output_throughput_per_gpu", True),
    "throughput_per_user": ("throughput_per_user", True),
    "goodput": ("goodput_rps", True),
    "goodput_per_gpu": ("goodput_per_gpu", True),
    "ttft": ("mean_ttft_ms", False),
    "e2e_latency": ("mean_e2e_ms", False),
    "min_gpus": ("gpu_count", False),
    "tokens_per_joule": ("output_tokens_per_joule", True),
    "cost": ("cost_per_million_tokens", False),
}
PARETO = ("throughput_per_gpu", "throughput_per_user")
"""The objectives of ``target: pareto`` unless ``optimization.pareto`` names others: the serving trade-off
between what a GPU delivers and what each user sees (both higher is better)."""
ALGORITHMS = ("grid", "random", "bayesian")
BAYESIAN_ROUND = 4
"""Trials a Bayesian search asks for at a time when ``optimizer.parallelism`` is unset: a fixed number,
so that the candidates do not depend on the machine's cores."""


@dataclass(frozen=True)
class SearchSpec:
    sla: Sla
    target: str = "throughput_per_gpu"
    min_candidate_gpus: int = 1
    max_candidate_gpus: int = 32
    min_goodput_rps: float | None = None
    strict_sla: bool = False
    algorithm: str = "grid"
    max_trials: int | None = None
    parallelism: int | None = None
    seed: int = 0
    candidate_timeout_seconds: float | None = None
    pareto: tuple[str, str] = PARETO
    """The two targets ``target: pareto`` trades off (``optimization.pareto``)."""
    gpu_hour_price: float | None = None
    """``evaluation.gpu_hour_price``: what a GPU costs an hour, for the ``cost`` metric (None: no such metric)."""

    @property
    def objectives(self) -> tuple[tuple[str, bool], ...]:
        """(metric, higher is better) of each objective: one, or two for ``pareto``."""
        return tuple(TARGETS[t] for t in self.pareto) if self.target == "pareto" else (TARGETS[self.target],)


def parse_search(data: dict) -> SearchSpec:
    """Read the search sections of a scenario mapping (each optional)."""
    root = _Node({k: data.get(k) for k in ("evaluation", "optimization", "optimizer")}, "")
    opt = root.node("optimization")
    strict = opt.bool("strict_sla", False)
    sla, gpu_hour_price = parse_evaluation(root.node("evaluation"), 1.0 if strict else DEFAULT_ATTAINMENT)
    sla = sla or Sla()
    if strict and sla.attainment != 1.0:
        raise ScenarioError(f"optimization.strict_sla: asks every completed request to meet the SLA, but "
                            f"evaluation.sla.attainment is {sla.attainment:g}; give one of them")
    target = opt.choice("target", (*TARGETS, "pareto"), "throughput_per_gpu")
    pareto = _pareto(opt, target)
    if "cost" in (target, *(pareto if target == "pareto" else ())) and gpu_hour_price is None:
        raise ScenarioError("evaluation.gpu_hour_price: needed by the cost target (what one GPU costs an hour)")
    cons = opt.node("constraints")
    lo = cons.int("min_candidate_gpus", 1)
    hi = cons.int("max_candidate_gpus", 32)
    if hi < lo:
        raise ScenarioError(f"optimization.constraints.max_candidate_gpus: must be at least min_candidate_gpus "
                            f"({lo}), got {hi}")
    min_goodput = cons.number("min_goodput_rps", None)
    cons.done()
    opt.done()
    if (strict or min_goodput is not None or target.startswith("goodput")) and not sla.bounded:
        raise ScenarioError("evaluation.sla: needed by goodput, strict_sla and min_goodput_rps; give at least one "
                            "of ttft_ms, tpot_ms, e2e_ms")
    optimizer = root.node("optimizer")
    algorithm = optimizer.choice("algorithm", ALGORITHMS, "grid")
    if algorithm == "bayesian" and importlib.util.find_spec("optuna") is None:
        raise ScenarioError("optimizer.algorithm: bayesian search needs Optuna; pip install 'simmodel[optuna]'")
    max_trials = optimizer.int("max_trials", None)
    if algorithm != "grid" and max_trials is None:
        raise ScenarioError(f"optimizer.max_trials: required by {algorithm} search")
    workers = optimizer.int("parallelism", None, maximum=256)
    seed = optimizer.int("seed", 0, minimum=0)
    timeout = optimizer.number("candidate_timeout_seconds", None, positive=True)
    optimizer.done()
    root.done()
    return SearchSpec(sla, target, lo, hi, min_goodput, strict, algorithm, max_trials, workers, seed, timeout,
                      pareto, gpu_hour_price)


def _pareto(opt: _Node, target: str) -> tuple[str, str]:
    """``optimization.pareto``: the two targets of ``target: pareto`` (two different names of ``TARGETS``)."""
    value = opt.raw("pareto", None)
    if value is None:
        return PARETO
    if target != "pareto":
        raise ScenarioError(f"{opt.at('pareto')}: only with target: pareto (the target is {target})")
    if (not isinstance(value, list) or len(value) != 2 or not all(isinstance(v, str) for v in value)
            or value[0] == value[1]):
        raise ScenarioError(f"{opt.at('pareto')}: must be a list of two different targets, got {value!r}")
    for name in value:
        if name not in TARGETS:
            raise ScenarioError(f"{opt.at('pareto')}: unknown target {name!r} (one of {', '.join(TARGETS)})")
    return value[0], value[1]
