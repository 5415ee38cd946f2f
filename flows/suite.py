"""A campaign's suite file (YAML): the problems, how each is optimized (a RunConfig, flows/config.py: the keys at the
top of the file and in `defaults` for every entry, an entry's own over them) and where the runs happen (here, one
after another, or on GPU work queues through a deployment). suites/nightly.yaml is an example; docs/CAMPAIGNS.md
describes every key.

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

from kernelflow.flows.config import RunConfig
from kernelflow.stages.contracts import Contract, sha256_text
from kernelflow.stages.errors import KernelflowError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = PROJECT_ROOT / "problems"
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # Prefect artifact keys allow lowercase letters, digits and dashes


class SuiteError(KernelflowError):
    """A suite file that cannot be read or does not validate; the message names the file and what is wrong."""

    def __init__(self, path: str, what: str):
        super().__init__(f"suite {path}: {what}")


class Settings(RunConfig):
    """How problems are optimized, as a suite's `defaults` or an entry gives it: RunConfig's fields, of which only
    those given count (an entry's over the defaults, the defaults over RunConfig's own); the rule that an image goes
    with the docker executor is checked on the merged configuration (Suite.config)."""

    def _image_with_docker(self) -> Settings:  # type: ignore[override]
        return self


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
    regression_floor: float = Field(default=0.05, ge=0, lt=1, description="a slowdown is flagged only beyond this "
                                    "fraction, however tight the intervals (flows/regression.py)")
    defaults: Settings = Field(default_factory=Settings, description="settings for every entry; RunConfig's fields "
                               "given at the top of the file (store, device, executor, image, llm, ...) count as "
                               "defaults too")
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

    @model_validator(mode="before")
    @classmethod
    def _top_level_defaults(cls, data: Any) -> Any:
        """RunConfig's fields at the top of the file are defaults for every entry (not also in `defaults`)."""
        if not isinstance(data, dict):
            return data
        top = {k: data[k] for k in RunConfig.model_fields if k in data}
        given = data.get("defaults") or {}
        if twice := sorted(set(top) & set(given if isinstance(given, dict) else {})):
            raise ValueError(f"{', '.join(twice)}: set both at the top of the suite and in `defaults`; keep one")
        if not top:
            return data
        rest = {k: v for k, v in data.items() if k not in top}
        return {**rest, "defaults": {**(given if isinstance(given, dict) else {}), **top}}

    @field_validator("problems", mode="before")
    @classmethod
    def _plain_entries(cls, value: Any) -> Any:
        return [{"problem": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @model_validator(mode="after")
    def _consistent(self) -> Suite:
        names = [e.name for e in self.problems]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"entries named twice: {', '.join(twice)}; give each a distinct `name`")
        for entry in self.problems:
            try:
                self.config(entry)
            except ValueError as e:
                raise ValueError(f"entry {entry.name}: {e}") from e
        return self

    @property
    def sha256(self) -> str:
        return sha256_text(self.text)

    @property
    def store(self) -> str | None:
        """The suite's store (a default for every entry): where the campaign's own tables go."""
        return self.defaults.store

    def config(self, entry: Entry) -> RunConfig:
        """The entry's RunConfig: its settings over the suite's defaults over RunConfig's own (llm key by key)."""
        base = self.defaults.model_dump(exclude_unset=True)
        own = entry.model_dump(exclude_unset=True, exclude={"problem", "solexec", "name"})
        merged = {**base, **own, "llm": {**base.get("llm", {}), **own.get("llm", {})}}
        return RunConfig.model_validate(merged)

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
