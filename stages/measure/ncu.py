"""Nsight Compute hardware counters per kernel for the profile stage (stages/profile.py calls
`collect_counters`).

Nsight Compute runs a small driver (NCU_DRIVER, written into the work dir, with the request as JSON) that rebuilds
the same problem, candidate, workload, weights and inputs as the profile stage, makes WARMUP_CALLS calls (Triton
JIT, cuBLAS heuristics and caches settle), then makes one call between torch.cuda.profiler.start()/stop()
(cudaProfilerStart/Stop). ncu runs with `--profile-from-start off`, so exactly the kernels of that call are
profiled without counting warm-up launches (simpler and sturdier than --launch-skip, whose count would
change with every candidate and torch version):

    ncu --clock-control none --target-processes all --profile-from-start off --metrics <METRICS>
        --export <workdir>/profile --force-overwrite <python> <workdir>/ncu_driver.py <request.json>

The report (`profile.ncu-rep`) is file "ncu_rep" of the result and ncu's console output file "ncu_log". The metrics
are then printed from the report with `ncu --import <report> --csv --page raw --print-units base` (a second,
cheap call: its stdout holds only the CSV, never the profiled program's own output) and parsed by
`parse_raw_csv`: a header row, a units row, then one row per kernel launch; thousands separators are removed,
"n/a" becomes None, byte and time values are scaled to bytes and nanoseconds by the units row. Rows are grouped
by kernel name (launch order kept): `invocations` = launches of that kernel in the one profiled call, and every
metric is the mean over those launches (`.sum` counters too: per launch, not per call; multiply by
`invocations` for per call). `duration_us` = mean gpu__time_duration.sum / 1000.

A metric ncu rejects does not fail the profile: when ncu's ==ERROR== lines name metrics of ours
(`drop_rejected`, which also reads ncu's "Failed to find metric regex:^name\\.(...)$" form), the run is
repeated without them (at most NCU_RETRIES times) and the message says which were dropped. Any other ncu failure
(not on PATH, permission to counters, LibraryNotLoaded, a timeout, no kernel profiled) gives Counters with no
kernels and `reason` saying exactly why; the profile stage then keeps status "ok" with counters="unavailable".

Checked on CPU (tests/stages/measure/test_ncu.py): the raw-CSV parser on the CSV of a real H200 report and on a hand-written
multi-kernel sample, the rejected-metric parser, ncu missing from PATH and the retry loop against a stand-in ncu
script. The command line, the driver, the report import and the metric names have no CPU test: their runs under ncu
on a GPU, and the replay passes this metric set costs, are in docs/LOG.md.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelflow.stages.contracts import KernelProfile, ProfileRequest
from kernelflow.stages.harness.instantiate import guarded, set_precision
from kernelflow.stages.measure.subject import WARMUP_CALLS, guard_for, instance, pick_workload

METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__block_size",
    "launch__grid_size",
    "launch__waves_per_multiprocessor",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__inst_executed.sum",
    "device__attribute_multiprocessor_count",
)
NCU_RETRIES = 3  # reruns after dropping rejected metrics
NCU_FALLBACKS: tuple[str, ...] = ("/usr/local/cuda/bin/ncu",)  # tried when ncu is not on PATH
DRIVER_OK = "kernelflow-ncu-driver: done"
NCU_DRIVER = '''"""kernelflow's Nsight Compute driver (written by stages/measure/ncu.py): warm up, then profile one call."""
import sys

from kernelflow.stages.measure.ncu import drive

drive(sys.argv[1])
'''
_UNIT_SCALE = {  # ncu unit -> factor to its base unit (nanoseconds, bytes); others are kept as printed
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
    "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3,
}
PROJECT_ROOT = Path(__file__).resolve().parents[2]


# ---- parsing ncu's output (pure functions, unit-tested on CPU) ----

def _number(text: str, unit: str) -> float | None:
    text = text.strip().replace(",", "")
    if text in ("", "n/a", "N/A"):
        return None
    try:
        return float(text) * _UNIT_SCALE.get(unit.strip(), 1.0)
    except ValueError:
        return None


def parse_raw_csv(text: str, metrics: tuple[str, ...] | list[str] = METRICS) -> list[KernelProfile]:
    """`ncu --csv --page raw` output -> one KernelProfile per kernel name, in launch order (see module doc)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV header (a line starting with \"ID\") in ncu's output")
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise ValueError(f"ncu's CSV has no 'Kernel Name' column: {header[:12]}")
    units: dict[str, str] = {}
    if body and body[0][col["ID"]].strip() == "":  # the units row
        units = dict(zip(header, body.pop(0), strict=True))
    wanted = [m for m in metrics if m in col]
    launches: dict[str, list[dict[str, float | None]]] = {}
    for row in body:
        values = {m: _number(row[col[m]], units.get(m, "")) for m in wanted}
        launches.setdefault(row[col["Kernel Name"]], []).append(values)
    return [_aggregate(name, runs) for name, runs in launches.items()]


def _aggregate(kernel: str, runs: list[dict[str, float | None]]) -> KernelProfile:
    means: dict[str, float | None] = {}
    for m in runs[0]:
        seen = [v for r in runs if (v := r.get(m)) is not None]
        means[m] = sum(seen) / len(seen) if seen else None
    ns = means.get("gpu__time_duration.sum")
    return KernelProfile(kernel=kernel, invocations=len(runs), duration_us=None if ns is None else ns / 1e3,
                         metrics=means)


def drop_rejected(metrics: list[str], ncu_output: str) -> tuple[list[str], list[str]]:
    """(kept, rejected): the metrics that ncu's ==ERROR== lines about metrics name, by full name or by counter
    name (ncu prints e.g. `Failed to find metric regex:^dram__bytes_read\\.sum$`). Nothing rejected when the
    errors are not about metrics."""
    errors = "\n".join(line.replace("\\", "") for line in ncu_output.splitlines()
                       if "==ERROR==" in line and "metric" in line.lower())
    rejected = [m for m in metrics if re.search(rf"(?<!\w){re.escape(m.split('.')[0])}(?!\w)", errors)]
    return [m for m in metrics if m not in rejected], rejected


def ncu_version(output: str) -> str:
    """The version from `ncu --version` ("Version 2025.3.1.0 (build ...)" -> "2025.3.1.0 (build ...)")."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    tagged = [line.removeprefix("Version").strip() for line in lines if line.startswith("Version")]
    return (tagged or lines or ["unknown"])[-1]


# ---- running ncu ----

@dataclass
class Counters:
    """What the ncu step produced: kernels and version, or the reason there are none."""

    kernels: list[KernelProfile] = field(default_factory=list)
    version: str | None = None
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # ProfileResult.files: paths under the work dir


def find_ncu() -> str | None:
    """$KERNELFLOW_NCU, else `ncu` on PATH, else the first of NCU_FALLBACKS that exists."""
    found = os.environ.get("KERNELFLOW_NCU") or shutil.which("ncu")
    return found or next((p for p in NCU_FALLBACKS if os.access(p, os.X_OK)), None)


def _run(cmd: list[str], timeout_s: float, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run in its own process group (ncu and the driver it starts die together on timeout); (exit code, output)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return proc.returncode, out


def _errors(output: str) -> str:
    lines = [line for line in output.splitlines() if "==ERROR==" in line]
    return "; ".join(lines)[:1500] or output.strip()[-1500:]


def collect_counters(req: ProfileRequest, timeout_s: float) -> Counters:
    """Profile the candidate's kernels with ncu (see module doc); never raises for ncu's own failures."""
    if timeout_s < 30:
        return Counters(reason=f"no time left for ncu ({timeout_s:.0f} s before the stage's deadline)")
    ncu = find_ncu()
    if ncu is None:
        return Counters(reason="ncu (Nsight Compute CLI) not found: not on PATH, KERNELFLOW_NCU unset, "
                               f"not at any of {list(NCU_FALLBACKS)}")
    workdir = Path(req.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.pop("TRITON_INTERPRET", None)
    deadline = time.monotonic() + timeout_s
    try:
        code, out = _run([ncu, "--version"], min(60.0, timeout_s), workdir, env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Counters(reason=f"`{ncu} --version` failed: {type(e).__name__}: {e}")
    if code != 0:
        return Counters(reason=f"`{ncu} --version` exited {code}: {out.strip()[-500:]}")
    found = Counters(version=ncu_version(out))
    request_path, driver = workdir / "profile.request.json", workdir / "ncu_driver.py"
    request_path.write_text(req.model_dump_json())
    driver.write_text(NCU_DRIVER)
    metrics, log, report = list(METRICS), [], None
    for _attempt in range(NCU_RETRIES + 1):
        for old in workdir.glob("profile*.ncu-rep"):
            old.unlink()
        cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--profile-from-start", "off",
               "--metrics", ",".join(metrics), "--export", str(workdir / "profile"), "--force-overwrite",
               sys.executable, str(driver), str(request_path)]
        try:
            code, out = _run(cmd, deadline - time.monotonic(), workdir, env)
        except subprocess.TimeoutExpired:
            found.reason = f"ncu did not finish within {timeout_s:.0f} s (the stage's deadline less a margin)"
            return found
        except OSError as e:
            found.reason = f"ncu could not be started: {type(e).__name__}: {e}"
            return found
        log.append(f"$ {' '.join(cmd)}\n{out}\nexit {code}\n")
        found.files["ncu_log"] = req.write("ncu_log.txt", "".join(log))
        report = next(workdir.glob("profile*.ncu-rep"), None)
        kept, rejected = drop_rejected(metrics, out)
        if rejected and kept:  # checked first: ncu may still write a report, empty, when it rejects a metric
            found.notes.append(f"ncu rejected metrics {rejected}: profiled without them")
            metrics = kept
            continue
        if report is not None and DRIVER_OK in out and not rejected:  # rejected and nothing kept: fails below
            break
        found.reason = f"ncu failed (exit {code}): {_errors(out)}"
        return found
    else:
        found.reason = f"ncu still rejected metrics after {NCU_RETRIES} retries: {_errors(out)}"
        return found
    assert report is not None
    if code != 0:
        found.notes.append(f"ncu exited {code} after writing its report")
    found.files["ncu_rep"] = report.relative_to(workdir).as_posix()
    try:
        code, csv_text = _run([ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"],
                              max(deadline - time.monotonic(), 10.0), workdir, env)
        found.kernels = parse_raw_csv(csv_text, metrics) if code == 0 else []
    except (subprocess.TimeoutExpired, OSError, ValueError) as e:
        found.reason = f"reading the ncu report failed: {type(e).__name__}: {e}"
        return found
    if code != 0:
        found.reason = f"`ncu --import` failed (exit {code}): {_errors(csv_text)}"
    elif not found.kernels:
        found.reason = f"ncu profiled no kernel in the measured call: {_errors(out)}"
    return found


# ---- the process ncu profiles ----

def drive(request_path: str) -> None:
    """The process ncu profiles: the same model, weights and inputs as the profile stage (stages/measure/subject.py); warm-up; one call
    between cudaProfilerStart and cudaProfilerStop."""
    req = ProfileRequest.model_validate_json(Path(request_path).read_text())
    set_precision(req.problem.policy)
    guard = guard_for(req)
    new, inputs = instance(req, pick_workload(req.problem, req.workload), "cuda", guard)
    with guard.section("profiled calls under ncu", timed=True) if guard else contextlib.nullcontext(), torch.no_grad():
        for _ in range(WARMUP_CALLS):
            guarded(new, *inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        new(*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(DRIVER_OK, flush=True)
