"""scripts/chunk.py: --max-minutes admits a problem only if the longest one so far would still end in the chunk."""

from tests.flows.test_flow import bench_script

Chunk = bench_script().Chunk  # as scripts/bench_gpu.py (and agreement.py) use it


def test_a_problem_starts_only_if_the_longest_so_far_would_end_inside_the_chunk(capsys):
    """The 2026-12-01 call: problems of 211 and 185 s; the third started at 396 s under the old check (start before
    --max-minutes, there 7) and was killed at 600 s. With the default 8 minutes the third is not started now."""
    now = [0.0]
    chunk = Chunk(8.0, clock=lambda: now[0])
    assert chunk.admits("01_softmax")
    now[0] = 211.0
    assert chunk.admits("03_layernorm")
    now[0] = 396.0
    assert not chunk.admits("15_add_rmsnorm")
    assert "stopping before 15_add_rmsnorm" in capsys.readouterr().out and chunk.longest == 211.0


def test_short_problems_fill_the_chunk():
    now = [0.0]
    chunk = Chunk(1.0, clock=lambda: now[0])
    started = []
    for name in "abcdefghij":
        if not chunk.admits(name):
            break
        started.append(name)
        now[0] += 10.0
    assert started == list("abcdef")  # the sixth starts at 50 s and ends at 60; a seventh would end at 70
