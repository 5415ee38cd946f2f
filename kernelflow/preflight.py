"""What a command checks before it starts work (and before Prefect starts), and the plain lines an error becomes.

A user's mistake is found here, or by the loaders these checks call (stages/problems/kernelbench.py: ProblemError;
flows/suite.py: SuiteError), before anything is recorded: a path that is not there, a problem or candidate file that
does not load, an option or suite key that is wrong, a GPU, store, Prefect API or LLM endpoint that is not there.
`explain` turns any exception into one or two lines; kernelflow/cli.py `main` prints them. Nothing here imports
Prefect except `dispatch_target`, which runs once Prefect is set up: the other checks run before the local Prefect
server starts.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, ValidationError

from kernelflow.stages.errors import KernelflowError, StoreUnavailable

if TYPE_CHECKING:
    from kernelflow.artifacts.store import Store
    from kernelflow.flows.config import RunConfig
    from kernelflow.flows.suite import Dispatch, Suite
    from kernelflow.stages.contracts import Baseline, Device, Problem

DEFAULT_LLM_URL = "https://api.openai.com/v1"  # where the openai SDK goes without OPENAI_BASE_URL
PROBE_S = 5.0  # seconds an LLM endpoint has to answer the check
# RunConfig (and LLMLimits) fields whose `kernelflow optimize` option is not --<field with dashes>
OPTIONS = {"wall_time_s": "--wall-time", "timing_budget_s": "--timing-budget", "max_tokens": "--llm-max-tokens",
           "max_usd": "--llm-max-usd", "stage_timeout_s": "--timeout"}
INTERNAL = ("path", "text")  # Suite fields the loader fills, never a key of the file


class UserError(KernelflowError):
    """A mistake in what the user gave (a path, an option's value, the machine a command needs); the message names it
    and says what to do."""


def device(given: Device | None) -> Device:
    """The device a command runs on: the one given, which must be usable here, else cuda where a GPU is visible."""
    import torch

    if given == "cuda" and not torch.cuda.is_available():
        why = "built without CUDA" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, no device visible"
        raise UserError(f"--device cuda: no CUDA GPU is visible on this machine (torch {torch.__version__}, {why}); "
                        "use --device cpu or run on a GPU host")
    return given or ("cuda" if torch.cuda.is_available() else "cpu")


def problem(path: str | Path) -> tuple[str, Problem]:
    """The problem file a path names (a SOL-ExecBench definition translated), absolute, and the problem, loaded and
    checked, its reference run once per CPU shape where it declares them (small: a reference that raises, returns
    NaN or all zeros is found here, not as every candidate's failed verification): ProblemError says what is wrong."""
    from kernelflow.stages.problems.kernelbench import check_runs, load_problem
    from kernelflow.stages.problems.solexec import resolve

    resolved = str(Path(resolve(path)).resolve())
    loaded = load_problem(resolved)
    if loaded.cpu_workloads:
        check_runs(loaded, "cpu")
    return resolved, loaded


def candidate_source(path: str) -> str:
    """A candidate file's source, when it exists, parses and binds ModelNew somewhere (a class, an assignment, an
    import, or the name as a string for setattr/globals). Nothing of it runs here: verify runs it in a stage
    process."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"candidate file {path}: {'is a directory' if file.is_dir() else 'no such file'}")
    source = file.read_text()
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as e:
        raise UserError(f"candidate file {path}: does not parse: SyntaxError: {e.msg} (line {e.lineno})") from e
    if not any(_binds_model_new(node) for node in ast.walk(tree)):
        raise UserError(f"candidate file {path}: defines no class ModelNew (a candidate is a module with "
                        "`class ModelNew(nn.Module)`, the reference Model's constructor and forward signature)")
    return source


def _binds_model_new(node: ast.AST) -> bool:
    if isinstance(node, ast.ClassDef | ast.FunctionDef):
        return node.name == "ModelNew"
    if isinstance(node, ast.Name):
        return node.id == "ModelNew" and isinstance(node.ctx, ast.Store)
    if isinstance(node, ast.alias):
        return node.name == "*" or (node.asname or node.name.rsplit(".", 1)[-1]) == "ModelNew"
    return isinstance(node, ast.Constant) and node.value == "ModelNew"


def baselines(text: str | None) -> list[Baseline] | None:
    """--baselines as a list of known baseline names."""
    from kernelflow.stages.contracts import Baseline

    if not text:
        return None
    names = [n.strip() for n in text.split(",")]
    if unknown := [n for n in names if n not in get_args(Baseline)]:
        raise UserError(f"--baselines: unknown {', '.join(map(repr, unknown))}; known: {', '.join(get_args(Baseline))}")
    return names  # type: ignore[return-value]


def store(given: str | None, reading: bool = False, probe: bool = True) -> Store:
    """The store a command names (`given`, else $KERNELFLOW_STORE, else ./runs), opened once it is usable: an S3
    store's endpoint answers (unless not `probe`); a local one is a directory, and exists already for a command that
    only reads."""
    from kernelflow.artifacts.store import Store

    root = given or os.environ.get("KERNELFLOW_STORE") or "runs"
    named = "--store" if given else "$KERNELFLOW_STORE" if os.environ.get("KERNELFLOW_STORE") else "the default store"
    if root.startswith("s3://"):
        from kernelflow.artifacts.s3 import S3Remote, split_url

        try:
            split_url(root)
        except ValueError as e:
            raise UserError(f"{named} {root}: {e}") from e
        if probe:
            S3Remote(root).probe()
    elif Path(root).exists() and not Path(root).is_dir():
        raise UserError(f"{named} {root}: not a directory (a store is a directory or s3://bucket/prefix)")
    elif reading and not Path(root).is_dir():
        raise UserError(f"{named} {root}: no such store (no run was recorded there); name one with --store or "
                        "$KERNELFLOW_STORE")
    return Store(root)


def llm_endpoint(model: str | None) -> None:
    """The llm proposer's model, key and endpoint are there: a model named, a key (OPENAI_API_KEY or a Prefect Secret
    block) and an endpoint that answers HTTP (any status: the key is not sent)."""
    if not (model or os.environ.get("KERNELFLOW_LLM_MODEL")):
        raise UserError("--proposer llm: no model: pass --model NAME or set KERNELFLOW_LLM_MODEL")
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("KERNELFLOW_LLM_SECRET_BLOCK")):
        raise UserError("--proposer llm: no API key: set OPENAI_API_KEY, or KERNELFLOW_LLM_SECRET_BLOCK to the name of "
                        "a Prefect Secret block holding it")
    url = os.environ.get("OPENAI_BASE_URL") or DEFAULT_LLM_URL
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=PROBE_S):
            return
    except urllib.error.HTTPError:  # it answers; what it thinks of the request is the proposer's business
        return
    except (urllib.error.URLError, OSError, ValueError) as e:
        why = getattr(e, "reason", e)
        where = (f"the LLM endpoint {url} (OPENAI_BASE_URL)" if os.environ.get("OPENAI_BASE_URL") else
                 f"OPENAI_BASE_URL is not set, and the default LLM endpoint {url}")
        raise UserError(f"--proposer llm: {where} does not answer ({why}); set OPENAI_BASE_URL to an "
                        "OpenAI-compatible endpoint that is up, e.g. http://HOST:8000/v1") from e


def run(config: RunConfig, loaded: Problem, resume: str | None = None) -> None:
    """What an optimize run of a loaded problem needs before it starts: `runnable_here`, a usable store holding the
    run it resumes, and the LLM endpoint of the llm proposer."""
    runnable_here(config, loaded)
    opened = store(config.store)
    if resume is not None and opened.read("problems", resume).empty:
        raise UserError(f"--resume {resume}: no such run in store {opened.location}")
    if config.proposer == "llm":
        llm_endpoint(config.llm.model)


def runnable_here(config: RunConfig, loaded: Problem) -> None:
    """The run's device, executor and SOL target are usable on this machine."""
    where = device(config.device)
    if config.executor == "inline" and where == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UserError("--executor inline on CPU runs Triton in this process, which needs TRITON_INTERPRET=1 set "
                        "before it starts; use --executor subprocess, or set it")
    if config.target_sol is not None:
        import torch

        from kernelflow.stages.measure.sol_target import floors
        from kernelflow.stages.problems.defaults import timed_sizes

        floors(loaded, config.sizes or timed_sizes(loaded, where),
               torch.cuda.get_device_name() if where == "cuda" else None)


class BrokenEntry(UserWarning):
    """A suite entry whose problem does not load: the campaign records it as failed and runs the others."""


def suite(loaded: Suite, store_given: str | None, here: bool) -> None:
    """A campaign's suite can run: its store is usable, and where the runs happen here (`here`) each entry is
    `runnable_here` and the LLM endpoint of llm entries answers. Every entry's problem is loaded first: a broken
    one is named now (a BrokenEntry warning; the campaign records it as failed and runs the others), and a suite
    whose entries are all broken is refused."""
    problems, broken = {}, []
    for entry in loaded.problems:
        try:
            problems[entry.name] = problem(loaded.problem_path(entry))[1]
        except KernelflowError as e:
            broken.append(f"suite {loaded.path}: entry {entry.name}: {e}")
    if len(broken) == len(loaded.problems):
        raise UserError("\n".join(broken))
    for line in broken:
        warnings.warn(BrokenEntry(f"{line} (recorded as failed; the other entries run)"), stacklevel=2)
    store(store_given or loaded.store)
    if not here:
        return
    configs = {entry.name: loaded.config(entry) for entry in loaded.problems if entry.name in problems}
    for name, config in configs.items():
        runnable_here(config, problems[name])
    if llm := next((c for c in configs.values() if c.proposer == "llm"), None):
        llm_endpoint(llm.llm.model)


def prefect_api() -> None:
    """A Prefect API set in the environment answers (before Prefect is imported; kernelflow/local_server.py starts a
    local one when none is set)."""
    from kernelflow.local_server import answers

    if (url := os.environ.get("PREFECT_API_URL")) and not answers(url):
        raise UserError(f"PREFECT_API_URL {url} does not answer; start that Prefect server, or unset PREFECT_API_URL "
                        "to record runs in a local one")


def dispatch_target(dispatch: Dispatch) -> None:
    """With dispatch `deployments`: the work pool and the optimize deployment are on the Prefect API (once Prefect is
    set up: this imports it)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.settings import get_current_settings

    with get_client(sync_client=True) as client:
        for what, name, read in (("work pool", dispatch.work_pool, client.read_work_pool),
                                 ("deployment", dispatch.deployment, client.read_deployment_by_name)):
            try:
                read(name)
            except ObjectNotFound as e:
                raise UserError(f"dispatch deployments: no {what} {name!r} on the Prefect API at "
                                f"{get_current_settings().api.url}; `kernelflow deploy` makes it there (set "
                                "PREFECT_API_URL to that server; infra/README.md)") from e


def options_error(error: ValidationError) -> UserError:
    """A RunConfig (or LLMLimits) built from `kernelflow optimize`'s options did not validate: each error as the
    option it came from."""
    def name(loc: tuple) -> str:
        field = next((part for part in reversed(loc) if isinstance(part, str)), None)
        return f"{OPTIONS.get(field, '--' + field.replace('_', '-'))}: " if field else ""

    return UserError("\n".join(name(e["loc"]) + _message(e) for e in error.errors(include_url=False)))


def validation_lines(error: ValidationError) -> list[str]:
    """A suite's (or another model's) validation error, a line per error, each naming where in the file: `entry 2`,
    `defaults`, `dispatch`, and the key."""
    model = _model_named(error.title)
    lines = []
    for e in error.errors(include_url=False):
        loc = e["loc"]
        if e["type"] == "extra_forbidden" and loc:
            where = loc[:-1]
            what = _unknown(str(loc[-1]), _known(model, where) if model else [])
        else:
            where, what = loc, _message(e)
        lines.append(": ".join([*_places(where), what]))
    return lines


def _places(loc: tuple) -> list[str]:
    out, parts = [], list(loc)
    while parts:
        part = parts.pop(0)
        if part == "problems" and parts and isinstance(parts[0], int):
            out.append(f"entry {parts.pop(0) + 1}")
        else:
            out.append(str(part) if not isinstance(part, int) else f"item {part + 1}")
    return out


def _message(e: Any) -> str:
    text = _plain(e["msg"])
    if e["type"] == "missing":
        return "missing (required)"
    value = e.get("input")
    return f"{text} (got {value!r})" if isinstance(value, str | int | float | bool) else text


def _unknown(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r} ({hint}known: {', '.join(known)})" if known else f"unknown key {key!r}"


def _known(model: type[BaseModel], loc: tuple) -> list[str]:
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        inner = _model_in(field.annotation) if field else None
        if inner is None:
            return []
        model = inner
    known = [f for f in model.model_fields if f not in INTERNAL]
    if model.__name__ == "Suite":  # RunConfig's fields at the top of a suite are defaults for every entry
        from kernelflow.flows.config import RunConfig

        known += [f for f in RunConfig.model_fields if f not in known]
    return known


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in get_args(annotation) if (m := _model_in(arg))), None)


def _model_named(title: str) -> type[BaseModel] | None:
    from kernelflow.flows.config import LLMLimits, RunConfig
    from kernelflow.flows.suite import Dispatch, Entry, Suite

    return {m.__name__: m for m in (Suite, Entry, Dispatch, RunConfig, LLMLimits)}.get(title)


def _plain(text: str) -> str:
    """pydantic's text without its links, error types and headers, on one line."""
    text = re.sub(r"\s*For further information visit \S+", "", text)
    text = re.sub(r" \[type=[^\]\n]*\]", "", text)
    text = re.sub(r"\d+ validation errors? for \w+", "", text).replace("Value error, ", "")
    return " ".join(text.split())


def explain(error: BaseException) -> list[str]:
    """The lines that say what went wrong: a known error's own message (one or two lines; a line per wrong suite key
    or broken suite entry), else the error's type and message with the way to see its traceback."""
    if isinstance(error, UserError):
        return str(error).splitlines()
    if isinstance(error, KernelflowError) and isinstance(error.__cause__, ValidationError):
        prefix = str(error).removesuffix(str(error.__cause__))  # e.g. "suite PATH: "
        return [prefix + line for line in validation_lines(error.__cause__)]
    if isinstance(error, ValidationError):
        return validation_lines(error)
    if isinstance(error, StoreUnavailable):
        return [f"store {error.url} cannot be reached ({error.action.strip()}: {type(error.error).__name__}: {error.error}); "
                "check the endpoint (AWS_ENDPOINT_URL), the credentials and the network"]
    if isinstance(error, KernelflowError):
        return _short(str(error))
    return _short(f"{type(error).__name__}: {error}", " (run with --debug for the traceback)")


def _short(text: str, tail: str = "") -> list[str]:
    """A message in at most two lines: its first and, when it has more, its last (a log's conclusion)."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()] or [""]
    kept = lines if len(lines) <= 2 else [lines[0], lines[-1].strip()]
    return [*kept[:-1], kept[-1] + tail]
