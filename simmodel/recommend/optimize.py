"""Bayesian search with Optuna (an optional extra): TPE for one objective, NSGA-II for ``pareto``.

A trial picks a mode and one value of each of that mode's dimensions: ordered numeric domains as an
integer index (so that the sampler sees their order), parallelism shapes and other choices as
categories. Trials are asked for in rounds of ``optimizer.parallelism`` (``BAYESIAN_ROUND`` when unset),
the round's new candidates are simulated together, and every trial of the round is told its result in
ask order, so the same seed and round size give the same candidates on any executor and machine. A trial
that lands on a combination already simulated is told that result again and costs no simulation;
``max_trials`` counts distinct candidates. Candidates that are not feasible are told as failed trials.
"""

from __future__ import annotations

from collections.abc import Callable

from simmodel.recommend.space import Candidate, SearchSpace
from simmodel.recommend.spec import BAYESIAN_ROUND, SearchSpec

ASKS_PER_TRIAL = 20
"""A search stops after this many asks per ``max_trials`` even if the sampler keeps returning
combinations already simulated (small spaces, converged samplers)."""


def _ordered(values: list) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return numbers and all(a < b for a, b in zip(values, values[1:]))


def suggest(trial, space: SearchSpace) -> int:
    """The combination number a trial picks."""
    g = 0
    prefix = ""
    if len(space.modes) > 1:
        g = space.modes.index(trial.suggest_categorical("engine.mode", space.modes))
        prefix = f"{space.modes[g]}:"
    digits = []
    for dim in space.grids[g][1]:
        name, count = prefix + dim.path, len(dim.values)
        if not dim.shape and _ordered(dim.values):
            digits.append(trial.suggest_int(name, 0, count - 1))
        else:
            digits.append(trial.suggest_categorical(name, list(range(count))))
    return space.number_of(g, digits)


def bayesian(spec: SearchSpec, space: SearchSpace, simulate: Callable[[list[Candidate]], None],
             entries: dict[int, dict]) -> None:
    """Run the search: ``simulate`` fills ``entries`` (by candidate id) for the candidates it is given."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    budget = min(spec.max_trials, space.size)
    round_size = spec.parallelism or BAYESIAN_ROUND
    if spec.target == "pareto":
        sampler = optuna.samplers.NSGAIISampler(seed=spec.seed, population_size=min(50, max(4, budget // 4)))
    else:
        sampler = optuna.samplers.TPESampler(seed=spec.seed)
    study = optuna.create_study(directions=["maximize" if higher else "minimize" for _, higher in spec.objectives],
                                sampler=sampler)
    ids: dict[int, int] = {}  # combination number -> candidate id
    asks = ASKS_PER_TRIAL * spec.max_trials
    while len(ids) < budget and asks > 0:
        trials, new = [], []
        for _ in range(min(round_size, budget - len(ids), asks)):
            trial = study.ask()
            asks -= 1
            number = suggest(trial, space)
            if number not in ids:
                ids[number] = len(ids) + 1
                new.append(space.candidate(ids[number], number))
            trials.append((trial, ids[number]))
        simulate(new)
        for trial, id in trials:
            entry = entries[id]
            if entry["status"] == "feasible":
                study.tell(trial, [entry["objectives"][metric] for metric, _ in spec.objectives])
            else:
                study.tell(trial, state=TrialState.FAIL)
