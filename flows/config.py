"""How one optimize run goes: its budgets, search strategy, proposer, backend, device, where its stages run, its
store, LLM limits and policy overrides. One model, from the command line (`kernelflow optimize`), a suite's defaults
and entries (flows/suite.py) or a deployment's parameters, to the optimize flow and its search."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kernelflow.stages.contracts import Backend, Baseline, Contract, Device, Policy, SizeSet
from kernelflow.stages.executors.docker import Docker
from kernelflow.stages.executors.run import Mode

SECRET_KEYS = ("api_key", "key", "token", "secret", "password")
StrategyName = Literal["greedy", "mcts", "ladder", "agents"]  # flows/search/: STRATEGIES has one of each


class LLMLimits(Contract):
    """The LLM proposer's model and limits per run; the endpoint and key come from the environment, never from here."""

    model: str | None = Field(default=None, description="model name (default $KERNELFLOW_LLM_MODEL)")
    max_tokens: int | None = Field(default=None, ge=1, description="stop a run when its LLM calls used this many tokens")
    max_usd: float | None = Field(default=None, gt=0, description="stop a run when its LLM calls cost this much "
                                  "(estimated from KERNELFLOW_LLM_PRICE_IN/_OUT, dollars per million tokens)")

    @model_validator(mode="before")
    @classmethod
    def _no_keys(cls, data: Any) -> Any:
        found = [k for k in data if k not in cls.model_fields and any(s in str(k).lower() for s in SECRET_KEYS)] \
            if isinstance(data, dict) else []
        if found:
            raise ValueError(f"{', '.join(map(str, found))}: a run's configuration never holds a key; set "
                             "OPENAI_API_KEY or KERNELFLOW_LLM_SECRET_BLOCK where the runs happen")
        return data


class RunConfig(Contract):
    """Every setting of one optimize run. Fields left at None are decided per run: the device by what is visible, the
    timed sizes and the baselines by the device (stages/problems/defaults.py), the store by $KERNELFLOW_STORE."""

    budget: int = Field(default=8, ge=1, description="candidates to evaluate (a warm start's seed counts)")
    wall_time_s: float = Field(default=3600.0, gt=0, description="wall-time budget of the whole run (search, "
                               "baseline timing and profiles), seconds")
    gpu_seconds: float | None = Field(default=None, gt=0, description="device seconds of verify, benchmark and "
                                      "profile calls, at most; None: no limit")
    target_sol: float | None = Field(default=None, gt=0, le=1, description="stop once the best candidate runs at this "
                                     "share of speed of light (a GPU whose ceilings are known)")
    strategy: StrategyName = Field(default="greedy", description="search strategy (flows/search/)")
    proposer: str = Field(default="builtin", description="builtin (templates) or llm")
    backend: Backend | None = Field(default=None, description="restrict candidates to one backend")
    llm: LLMLimits = Field(default_factory=LLMLimits, description="the llm proposer's model and limits")
    device: Device | None = Field(default=None, description="cuda or cpu; None: cuda where a GPU is visible")
    sizes: SizeSet | None = Field(default=None, description="workload set to time; None: gpu on cuda")
    baselines: list[Baseline] | None = Field(default=None, description="baselines timed beside each candidate; "
                                             "None: eager and torch.compile on cuda, eager on cpu")
    timing_budget_s: float | None = Field(default=None, gt=0, description="seconds of timing per workload in one "
                                          "benchmark call, at most (a search's own rungs may ask for less); None: 30 "
                                          "on cuda, 5 on cpu")
    executor: Literal["subprocess", "inline", "docker"] = Field(default="subprocess", description="where stages that "
                                                                "run candidate code run")
    image: str | None = Field(default=None, description="stage worker image, for executor docker")
    stage_timeout_s: float = Field(default=600.0, gt=0, description="deadline of one stage call, seconds")
    store: str | None = Field(default=None, description="artifact store: a directory or s3://bucket/prefix; None: "
                              "$KERNELFLOW_STORE, else ./runs")
    policy: dict[str, bool] | None = Field(default=None, description="Policy fields that override the problem's "
                                           "(e.g. allow_vendor_libraries: false)")
    seed: int = Field(default=0, description="the run's base seed")
    profile: bool = Field(default=True, description="profile promoted candidates")
    baseline_profiles: bool = Field(default=True, description="profile the baselines once per run")
    families: list[str] | None = Field(default=None, min_length=1, description="the template families the builtin "
                                       "proposer may use (stages/templates/), e.g. ['rowwise', 'inductor']; None: all")
    seeds: int | None = Field(default=None, ge=0, description="in a run of another proposer (llm), candidates of "
                              "the builtin proposer evaluated first (each matching template family's best guess), so "
                              "that its first proposal has the best of them to beat; at most the budget less one; "
                              "None: one per matching family; 0: none")
    warm_start: bool = Field(default=False, description="evaluate the last finished run's best candidate of the same "
                             "problem (same source) first")

    @field_validator("proposer")
    @classmethod
    def _known_proposer(cls, value: str) -> str:
        from kernelflow.stages.proposers import PROPOSERS

        if value not in PROPOSERS:
            raise ValueError(f"unknown proposer {value!r}; known: {', '.join(sorted(PROPOSERS))}")
        return value

    @field_validator("families")
    @classmethod
    def _known_families(cls, value: list[str] | None) -> list[str] | None:
        from kernelflow.stages.proposers.builtin import families

        families(value)
        return value

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: dict[str, bool] | None) -> dict[str, bool] | None:
        if value and (unknown := sorted(set(value) - set(Policy.model_fields))):
            raise ValueError(f"unknown policy fields {unknown}; known: {', '.join(Policy.model_fields)}")
        return value

    @model_validator(mode="after")
    def _image_with_docker(self) -> RunConfig:
        if (self.executor == "docker") != (self.image is not None):
            raise ValueError("executor docker goes with an image (e.g. kernelflow-cpu), and an image with executor "
                             "docker")
        return self

    def device_here(self) -> Device:
        """The run's device: the one set, else cuda where a GPU is visible, else cpu."""
        import torch

        return self.device or ("cuda" if torch.cuda.is_available() else "cpu")

    def mode(self) -> Mode:
        """Where stage calls run: "inline", "subprocess", or a Docker executor on the image."""
        return Docker(image=self.image) if self.executor == "docker" and self.image else self.executor  # type: ignore[return-value]

    def policy_of(self, problem_policy: Policy) -> Policy:
        """The problem's policy with this run's overrides."""
        return Policy(**{**problem_policy.model_dump(), **(self.policy or {})})
