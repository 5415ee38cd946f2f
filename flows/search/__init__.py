"""Search strategies, found by name (`kernelflow optimize --strategy NAME`); flows/search/protocol.py holds the
contract and the loop they share."""

from __future__ import annotations

from kernelflow.flows.search.agents import Agents
from kernelflow.flows.search.greedy import Greedy
from kernelflow.flows.search.ladder import Ladder
from kernelflow.flows.search.mcts import Mcts
from kernelflow.flows.search.protocol import Strategy

STRATEGIES: dict[str, type[Strategy]] = {"greedy": Greedy, "mcts": Mcts, "ladder": Ladder, "agents": Agents}
