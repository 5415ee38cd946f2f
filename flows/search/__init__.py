"""Search strategies, found by name (`kernelflow optimize --strategy NAME`) in STRATEGIES and imported when one is
asked for (so naming them imports none); flows/search/protocol.py holds the contract and the loop they share."""

from __future__ import annotations

import importlib
from typing import Any

STRATEGIES = {"greedy": "kernelflow.flows.search.greedy:Greedy", "mcts": "kernelflow.flows.search.mcts:Mcts",
              "ladder": "kernelflow.flows.search.ladder:Ladder", "agents": "kernelflow.flows.search.agents:Agents"}


def strategy_class(name: str) -> Any:
    """The class of strategy `name` (a flows.search.protocol.Strategy)."""
    module, _, cls = STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), cls)
