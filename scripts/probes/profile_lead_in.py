"""Does the profile stage's time follow the benchmark's lead-in? (stages/profile.py `_measure`, sixteenth session.)

For each problem's first GPU shape and each baseline (eager, torch.compile), in one process: the profile stage's
`_measure` as it is now (each timed call after ~SUSTAIN_US of untimed calls), and the stage's earlier loop beside it
(the same warm-ups, then TIMED_CALLS calls timed back to back by Timer.time_us, no lead-in). Prints one JSON line per
row: the two medians in us and the SM clock read after each timed call of the earlier loop (NVML; None without it).
The benchmark stage's median of the same contender and shape is in the agreement records of the same device call.

`python3 scripts/probes/profile_lead_in.py --problems 10,01`. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import torch

    from stages import profile
    from stages.contracts import ProfileRequest
    from stages.instantiate import guarded, set_precision
    from stages.problem import load_problem
    from stages.timing import Timer

    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", default="10,01")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_lead_in.py needs CUDA")
    for prefix in args.problems.split(","):
        path = next((ROOT / "problems").glob(f"{prefix}*.py"))
        problem = load_problem(path)
        set_precision(problem.policy)
        w = problem.gpu_workloads[0]
        for contender in ("eager", "compile"):
            with tempfile.TemporaryDirectory() as work:
                req = ProfileRequest(problem=problem, contender=contender, workdir=work, blob_dir=work, workload=w.name)
                now, _, _ = profile._measure(req, w)
                new, inputs = profile.instance(req, w, "cuda")
                timer, times, clocks = Timer("cuda"), [], []
                with torch.no_grad():
                    for _ in range(profile.WARMUP_CALLS):
                        guarded(new, *inputs)
                    for _ in range(profile.TIMED_CALLS):
                        us, out = timer.time_us(new, inputs)
                        times.append(us)
                        clocks.append(timer.last_clock)
                        del out
            print(json.dumps({"problem": path.stem, "workload": w.name, "contender": contender,
                              "profile_now_us": now, "earlier_loop_us": median(times),
                              "earlier_loop_clocks": clocks[::10]}), flush=True)


if __name__ == "__main__":
    main()
