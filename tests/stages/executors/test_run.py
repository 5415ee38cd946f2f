"""The executor says during which phase a stage process ended without a result (stages/phase.py): the phase file the
process keeps, read back, and the verdict told from it. End to end (a verify process that a candidate ends):
tests/stages/test_verify.py and tests/stages/harness/test_integrity.py."""

import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.stages import phase

ROOT = Path(__file__).resolve().parents[3]
HELD_OUT = ("cheat", "shape hard-coding: right at every declared shape; the process died at the held-out shape")


def ended_in(tmp_path: Path, body: str) -> phase.Died | None:
    """Run `body` in a process that keeps a phase file as a stage process does (phase.record); what it left."""
    result = tmp_path / "verify.result.json"
    script = f"import os\nfrom kernelflow.stages import phase\nphase.record({str(result)!r})\n{body}\n"
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=60)
    return phase.died(result)


def test_os_exit_from_candidate_code_is_named(tmp_path: Path):
    died = ended_in(tmp_path, "with phase.running('cpu0 trial 0 call 1', candidate=True):\n    os._exit(0)")
    assert died is not None and died.candidate and died.ended == "os._exit(0)"
    assert died.verdict("crash", "exited with status 0 without writing a result") == \
        ("crash", "the candidate ended the process with os._exit(0) during cpu0 trial 0 call 1")


def test_a_system_exit_leaving_candidate_code_is_named(tmp_path: Path):
    died = ended_in(tmp_path, "with phase.running('import', candidate=True):\n    raise SystemExit(4)")
    assert died is not None and died.ended == "SystemExit(4)" and died.phases[-1][0] == "import"


def test_a_crash_inside_a_step_with_a_verdict_gets_that_verdict(tmp_path: Path):
    died = ended_in(tmp_path, f"with phase.running('the held-out shape', verdict={HELD_OUT!r}):\n"
                              "    with phase.running('cpu0-held-out trial 0 call 1', candidate=True):\n"
                              "        os.abort()")
    assert died is not None and died.ended is None
    kind, why = died.verdict("crash", "killed by signal SIGABRT")
    assert kind == "cheat" and why == (f"{HELD_OUT[1]}: the candidate ended the process (killed by signal SIGABRT) "
                                       "during cpu0-held-out trial 0 call 1")
    # the harness's own code inside the step (an allocator freeing what an out-of-bounds store corrupted)
    died = ended_in(tmp_path, f"with phase.running('the held-out shape', verdict={HELD_OUT!r}):\n    os.abort()")
    assert died is not None and not died.candidate
    assert died.verdict("crash", "killed by signal SIGABRT") == \
        ("cheat", f"{HELD_OUT[1]}: killed by signal SIGABRT during the held-out shape")


def test_a_deadline_keeps_its_kind_and_says_where(tmp_path: Path):
    died = ended_in(tmp_path, f"with phase.running('the held-out shape', verdict={HELD_OUT!r}):\n"
                              "    with phase.running('a call', candidate=True):\n        os.kill(os.getpid(), 9)")
    assert died is not None
    assert died.verdict("timeout", "killed after the 15 s deadline") == \
        ("timeout", "killed after the 15 s deadline, during a call")


def test_nothing_is_said_outside_every_phase(tmp_path: Path):
    """The harness's own code, after the candidate's sections (the stage's INFRA_EXIT is the harness's): no phase."""
    assert ended_in(tmp_path, "with phase.running('a call', candidate=True):\n    pass\nos._exit(3)") is None
    assert phase.died(tmp_path / "missing.result.json") is None


@pytest.mark.parametrize("text", ["", "not json\n", '{"phases": [{"what": "x"}]}\n', '{"phases": 3}\n'])
def test_an_unreadable_phase_file_says_nothing(tmp_path: Path, text: str):
    (tmp_path / "verify.phase").write_text(text)
    assert phase.died(tmp_path / "verify.result.json") is None


def test_only_the_contract_s_failure_kinds_are_taken_from_the_file(tmp_path: Path):
    """The candidate could rewrite the file through its open descriptor: a kind that is not a FailureKind (or "ok")
    is not taken from it."""
    (tmp_path / "verify.phase").write_text('{"phases": [{"what": "a call", "candidate": false, '
                                           '"verdict": ["ok", "fine"]}], "ended": null}\n')
    died = phase.died(tmp_path / "verify.result.json")
    assert died is not None and died.verdict("crash", "killed by signal SIGSEGV") == \
        ("crash", "killed by signal SIGSEGV during a call")


def test_the_phase_file_is_named_after_the_result():
    assert phase.path_for("/w/benchmark.result.json") == Path("/w/benchmark.phase")
