"""``evaluation``: the service-level agreement a run is measured against (``run``'s goodput, a search's
feasibility): bounds on time to first token, time per output token and end-to-end latency, and the
fraction of requests that must meet them; and the price of a GPU-hour, for the cost per million tokens.
"""

from __future__ import annotations

from simmodel.config.node import _Node
from simmodel.config.schema import DEFAULT_ATTAINMENT, Sla
from simmodel.errors import ScenarioError


def parse_evaluation(node: _Node, attainment: float = DEFAULT_ATTAINMENT) -> tuple[Sla | None, float | None]:
    """``evaluation``: the SLA a run is measured against (``run``'s goodput, a search's feasibility), or
    None when there is no ``evaluation.sla``, and ``gpu_hour_price`` (what one GPU costs an hour, in any
    currency; None: no cost figures). ``attainment``: the SLA's default required fraction."""
    sla = parse_sla(node.node("sla"), attainment) if node.has("sla") else None
    price = node.number("gpu_hour_price", None, positive=True)
    node.done()
    return sla, price


def parse_sla(node: _Node, attainment: float = DEFAULT_ATTAINMENT) -> Sla:
    """``evaluation.sla``: ``ttft_ms``, ``tpot_ms`` (``itl_ms``, its earlier name, is accepted), ``e2e_ms``
    and ``attainment`` (0 < a ≤ 1); at least one bound."""
    tpot, itl = (node.number(k, None, positive=True) for k in ("tpot_ms", "itl_ms"))
    if tpot is not None and itl is not None:
        raise ScenarioError(f"{node.at('itl_ms')}: the earlier name of tpot_ms (the bound on a request's mean "
                            f"time per output token); give one of them")
    sla = Sla(node.number("ttft_ms", None, positive=True), itl if tpot is None else tpot,
              node.number("e2e_ms", None, positive=True),
              node.number("attainment", attainment, positive=True, maximum=1.0))
    node.done()
    if not sla.bounded:
        raise ScenarioError(f"{node.path}: give at least one bound of ttft_ms, tpot_ms, e2e_ms")
    return sla
