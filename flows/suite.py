"""A campaign's suite file (YAML): the problems, and how each is optimized: budgets, strategy, proposer, LLM limits,
executor, store, device, and where the runs happen (here, one after another, or on GPU work queues through a
deployment). suites/nightly.yaml is an example; docs/CAMPAIGNS.md describes every key.

    name: nightly
    store: s3://kernelflow/nightly             # --store overrides it
    defaults: {budget: 8, strategy: ladder}    # any setting below, for every problem
    problems:
      - 09_silu                                # a stem of problems/ ...
      - problems/17_elementwise_chain.py       # ... or a path (relative to the suite file, then to the project)
      - {problem: 01_softmax, name: softmax-llm, proposer: llm, budget: 4}
      - {solexec: sol/rmsnorm_d4096}           # a SOL-ExecBench definition folder (definition.json, workload.jsonl)
    llm: {model: NAME, max_tokens: 2000000, max_usd: 5}

A suite never holds a key: the LLM endpoint and key come from the environment of the process that runs the
proposer (OPENAI_BASE_URL, OPENAI_API_KEY or KERNELFLOW_LLM_SECRET_BLOCK), as for `kernelflow optimize`.
A SOL-ExecBench definition (a folder with definition.json and workload.jsonl, named by `solexec:` or by `problem:`)
is translated into a problem module first (stages/problems/solexec.py); optimize then runs it like any other problem file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator, model_validator

from kernelflow.stages.contracts import Backend, Baseline, Contract, Device, SizeSet, sha256_text
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.executors.docker import Docker
from kernelflow.stages.executors.run import Mode

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = PROJECT_ROOT / "problems"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # Prefect artifact keys allow lowercase letters, digits and dashes
SECRET_KEYS = ("api_key", "key", "token", "secret", "password")


class SuiteError(KernelflowError):
    """A suite file that cannot be read or does not validate; the message names the file and what is wrong."""

    def __init__(self, path: str, what: str):
        super().__init__(f"suite {path}: {what}")


class Settings(Contract):
    """How one problem is optimized; unset fields fall back to the suite's defaults, then to optimize's own."""

    budget: int | None = Field(default=None, ge=1, description="candidates to evaluate (a warm start's seed counts)")
    strategy: str | None = Field(default=None, description="search strategy (flows/search/): greedy, mcts, ladder, "
                                 "agents")
    proposer: str | None = Field(default=None, description="builtin (templates) or llm")
    backend: Backend | None = Field(default=None, description="restrict candidates to one backend")
    wall_time_s: float | None = Field(default=None, gt=0, description="wall-time budget of the run, seconds")
    gpu_seconds: float | None = Field(default=None, gt=0, description="device seconds of verify, benchmark and "
                                      "profile calls, at most")
    sizes: SizeSet | None = Field(default=None, description="workload set to time (default: gpu on cuda)")
    baselines: list[Baseline] | None = Field(default=None, description="baselines timed beside each candidate")
    policy: dict[str, bool] | None = Field(default=None, description="Policy fields that override the problem's")
    seed: int | None = Field(default=None, description="the run's base seed")
    profile: bool | None = Field(default=None, description="profile promoted candidates (and the baselines)")
    target_sol: float | None = Field(default=None, gt=0, le=1, description="stop once the best candidate runs at this "
                                     "share of speed of light (a GPU whose ceilings are known)")

    @field_validator("strategy")
    @classmethod
    def _known_strategy(cls, value: str | None) -> str | None:
        from kernelflow.flows.search import STRATEGIES

        if value is not None and value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r}; known: {', '.join(sorted(STRATEGIES))}")
        return value

    @field_validator("proposer")
    @classmethod
    def _known_proposer(cls, value: str | None) -> str | None:
        from kernelflow.stages.proposers import PROPOSERS

        if value is not None and value not in PROPOSERS:
            raise ValueError(f"unknown proposer {value!r}; known: {', '.join(sorted(PROPOSERS))}")
        return value


class Entry(Settings):
    """One problem of the suite, with its own settings."""

    problem: str = Field(default="", description="a stem of problems/ (09_silu), a path to a KernelBench .py file "
                         "or to a SOL-ExecBench definition folder")
    solexec: str | None = Field(default=None, description="instead of `problem`: a SOL-ExecBench definition folder "
                                "(definition.json + workload.jsonl) or its definition.json")
    name: str = Field(default="", description="the entry's name in the campaign's tables and artifacts (default: "
                      "the problem's stem, or the definition's folder); list a problem twice, e.g. with two "
                      "proposers, under two names")

    @model_validator(mode="after")
    def _named(self) -> Entry:
        if bool(self.problem) == (self.solexec is not None):
            raise ValueError(f"an entry names exactly one of `problem` and `solexec` ({self.problem or self.solexec})")
        given = Path(self.solexec or self.problem)
        if not self.name:
            self.name = given.parent.name if given.name == "definition.json" else given.stem
        return self


class LLM(Contract):
    """The LLM proposer's model and limits per run; the endpoint and key come from the environment, never from here."""

    model: str | None = Field(default=None, description="model name (default $KERNELFLOW_LLM_MODEL)")
    max_tokens: int | None = Field(default=None, ge=1, description="stop a run when its LLM calls used this many tokens")
    max_usd: float | None = Field(default=None, gt=0, description="stop a run when its LLM calls cost this much")

    @model_validator(mode="before")
    @classmethod
    def _no_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and (found := [k for k in data if any(s in str(k).lower() for s in SECRET_KEYS)]):
            raise ValueError(f"{', '.join(map(str, found))}: a suite never holds a key; set OPENAI_API_KEY or "
                             "KERNELFLOW_LLM_SECRET_BLOCK where the runs happen")
        return data


class Dispatch(Contract):
    """Where the per-problem optimize runs happen."""

    mode: Literal["local", "deployments"] = Field(default="local", description="local: subflows of the campaign, one "
                                                  "after another; deployments: one flow run per problem on the GPU "
                                                  "work queues (infra/), at most one per queue at a time")
    deployment: str = Field(default="optimize/gpu", description="the optimize deployment (flow/deployment)")
    work_pool: str = Field(default="kernelflow-gpu", description="the work pool whose GPU queues take the runs")
    queues: list[str] | None = Field(default=None, min_length=1, description="queues to use; default every queue of "
                                     "the pool named gpu-N or HOST-gpu-N")
    poll_s: float = Field(default=10.0, gt=0, description="seconds between looks at the flow runs in flight")
    run_timeout_s: float | None = Field(default=None, gt=0, description="a run still unfinished after this long "
                                        "is recorded as failed (and left running)")


class Suite(Contract):
    """A campaign's suite."""

    name: str = Field(description="lowercase letters, digits, dashes; campaigns of one suite are compared night "
                      "to night")
    description: str = ""
    store: str | None = Field(default=None, description="artifact store: a directory or s3://bucket/prefix "
                              "(default $KERNELFLOW_STORE or ./runs)")
    device: Device | None = Field(default=None, description="default: cuda where a GPU is visible")
    executor: Literal["subprocess", "inline", "docker"] = Field(default="subprocess", description="where stages "
                                                                "that run candidate code run")
    image: str | None = Field(default=None, description="stage worker image, for executor: docker")
    regression_floor: float = Field(default=0.05, ge=0, lt=1, description="a slowdown is flagged only beyond this "
                                    "fraction, however tight the intervals (flows/regression.py)")
    defaults: Settings = Field(default_factory=Settings)
    llm: LLM = Field(default_factory=LLM)
    dispatch: Dispatch = Field(default_factory=Dispatch)
    problems: list[Entry] = Field(min_length=1)
    path: str = Field(default="", description="the suite file, once loaded")
    text: str = Field(default="", description="the suite file's text, once loaded")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError(f"{value!r}: use lowercase letters, digits and dashes")
        return value

    @field_validator("problems", mode="before")
    @classmethod
    def _plain_entries(cls, value: Any) -> Any:
        return [{"problem": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _consistent(self) -> Suite:
        names = [e.name for e in self.problems]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"entries named twice: {', '.join(twice)}; give each a distinct `name`")
        if (self.executor == "docker") != (self.image is not None):
            raise ValueError("executor: docker goes with image: NAME, and image with executor: docker")
        return self

    @property
    def sha256(self) -> str:
        return sha256_text(self.text)

    def mode(self) -> Mode:
        return Docker(image=self.image) if self.executor == "docker" and self.image else self.executor  # type: ignore[return-value]

    def problem_path(self, entry: Entry) -> str:
        """The entry's problem file: a path relative to the suite file, the working directory or the project; a
        stem in problems/; a SOL-ExecBench definition's translated module (stages/problems/solexec.py). Unresolved or broken,
        a file that fails to load with the reason, as the entry's own failure."""
        from kernelflow.stages.problems.solexec import is_definition, resolve

        given = Path(entry.solexec or entry.problem)
        bases = [Path(self.path).parent if self.path else Path.cwd(), Path.cwd(), PROJECT_ROOT]
        tried = [given] if given.is_absolute() else [(b / given).resolve() for b in bases]
        stem = entry.solexec is None and given.suffix != ".py" and len(given.parts) == 1
        if stem and not any(is_definition(p) for p in tried):
            return str(PROBLEMS / f"{entry.problem}.py")
        found = next((p for p in tried if p.is_file() or is_definition(p)), tried[0])
        return resolve(found, deferred=True)

    def optimize_kwargs(self, entry: Entry) -> dict[str, Any]:
        """optimize's parameters for this entry (store and warm start are the campaign's to add); unset settings are
        left out, so optimize's own defaults apply."""
        settings = {**self.defaults.model_dump(exclude_none=True),
                    **entry.model_dump(exclude_none=True, exclude={"problem", "solexec", "name"})}
        if "gpu_seconds" in settings:
            settings["gpu_s_budget"] = settings.pop("gpu_seconds")
        llm = {"model": self.llm.model, "llm_max_tokens": self.llm.max_tokens, "llm_max_usd": self.llm.max_usd}
        return {"problem_path": self.problem_path(entry), "device": self.device, "executor": self.mode(),
                **{k: v for k, v in llm.items() if v is not None}, **settings}


def load_suite(path: str | Path) -> Suite:
    """A suite file: a path, relative to the working directory or else to the project (a deployment's
    `suites/nightly.yaml`)."""
    path = Path(path)
    if not path.is_absolute() and not path.exists() and (PROJECT_ROOT / path).exists():
        path = PROJECT_ROOT / path
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as e:
        raise SuiteError(str(path), f"cannot be read: {e}") from e
    if not isinstance(data, dict):
        raise SuiteError(str(path), "must be a mapping with at least `name` and `problems`")
    try:
        return Suite.model_validate({**data, "path": str(path.resolve()), "text": text})
    except ValueError as e:
        raise SuiteError(str(path), str(e)) from e
