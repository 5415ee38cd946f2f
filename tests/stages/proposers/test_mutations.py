"""Mutations: each tool's action moves the parameters it can express, within bounds; the rest say why not."""

from kernelflow.stages.contracts import Action
from kernelflow.stages.proposers.mutations import apply, explore, why_not

MATMUL = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 16, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
ROWWISE = {"num_warps": 8, "max_block_d": 16384, "min_tile": 4096}
ELEMENTWISE = {"BLOCK": 1024, "num_warps": 8}


def test_occupancy_moves_follow_the_limiter():
    shared = apply(Action(kind="raise_occupancy", params={"limiter": "shared memory"}), MATMUL)
    assert shared[0] == {**MATMUL, "num_stages": 2} and {**MATMUL, "BLOCK_K": 8} not in shared  # BLOCK_K 16 is the floor
    regs = apply(Action(kind="raise_occupancy", params={"limiter": "registers"}), MATMUL)
    assert regs[0] == {**MATMUL, "num_warps": 16} and {**MATMUL, "BLOCK_N": 32} in regs
    assert apply(Action(kind="raise_occupancy", params={"limiter": "warps per block"}), ELEMENTWISE) == [
        {"BLOCK": 1024, "num_warps": 4}]


def test_latency_and_parallelism_moves():
    assert apply(Action(kind="hide_memory_latency"), MATMUL)[0] == {**MATMUL, "num_stages": 4}
    assert apply(Action(kind="hide_memory_latency"), ROWWISE)[0] == {**ROWWISE, "num_warps": 16}
    assert apply(Action(kind="more_parallelism"), ROWWISE) == [{**ROWWISE, "min_tile": 2048}]
    assert apply(Action(kind="reduce_dram_traffic"), ROWWISE) == [{**ROWWISE, "max_block_d": 32768}]
    assert apply(Action(kind="increase_ilp"), ELEMENTWISE)[:2] == [{"BLOCK": 2048, "num_warps": 8},
                                                                    {"BLOCK": 1024, "num_warps": 4}]


def test_long_rows_move_the_looped_kernel_apart_and_a_joint_move_stays_in_bounds():
    """The looped kernel's chunk and warps move on their own (its low occupancy halves the chunk, more DRAM
    traffic doubles it); a wider resident row stops at 32768 (the resident kernel's warps follow the row,
    rows.resident_warps, and 32 warps hold 32768 at 32 elements a thread)."""
    looped = {"num_warps": 16, "max_block_d": 16384, "loop_block_d": 16384, "loop_warps": 16}
    regs = apply(Action(kind="raise_occupancy", params={"limiter": "registers"}), looped)
    assert {**looped, "loop_block_d": 8192} in regs and {**looped, "loop_warps": 32} in regs
    traffic = apply(Action(kind="reduce_dram_traffic"), looped)
    assert traffic == [{**looped, "max_block_d": 32768}, {**looped, "loop_block_d": 32768}]
    aimed = apply(Action(kind="raise_occupancy", params={"limiter": "registers", "kernel": "_kf_row_looped"}), looped)
    assert aimed[:2] == [{**looped, "loop_block_d": 8192}, {**looped, "loop_warps": 32}]  # that kernel's own first
    assert sorted(map(str, aimed)) == sorted(map(str, regs))
    widest = {**looped, "max_block_d": 32768}
    assert apply(Action(kind="reduce_dram_traffic"), widest) == [{**widest, "loop_block_d": 32768}]


def test_a_finding_on_the_multi_row_looped_kernel_moves_its_tile_first():
    """`_kf_rows_looped` ends like the one-row kernels' `_looped`: its own parameter, min_tile, comes first."""
    strided = {"num_warps": 8, "max_block_d": 32768, "min_tile": 4096, "loop_block_d": 16384, "loop_warps": 16,
               "strided_rows": 32}
    aimed = apply(Action(kind="increase_ilp", params={"kernel": "_kf_rows_looped"}), strided)
    assert aimed[0] == {**strided, "min_tile": 8192} and {**strided, "num_warps": 4} in aimed[1:]
    aimed = apply(Action(kind="raise_occupancy", params={"limiter": "registers", "kernel": "_kf_row_looped"}), strided)
    assert aimed[0] in ({**strided, "loop_block_d": 8192}, {**strided, "loop_warps": 32})
    tiled = {**strided, "min_tile": 8192, "tile_warps": 4, "strided_block_d": 128}
    aimed = apply(Action(kind="increase_ilp", params={"kernel": "_kf_rows_looped"}), tiled)
    assert aimed[:2] == [{**tiled, "min_tile": 16384}, {**tiled, "strided_block_d": 256}]
    aimed = apply(Action(kind="remove_spills", params={"kernel": "_kf_rows_resident"}), tiled)
    assert aimed[0] == {**tiled, "tile_warps": 8} and {**tiled, "strided_block_d": 64} in aimed[1:]


def test_bounds_hold_and_inexpressible_actions_say_why():
    top = {"BLOCK": 16384, "num_warps": 16}
    assert apply(Action(kind="vectorize_access"), top) == [{"BLOCK": 16384, "num_warps": 8}]
    assert apply(Action(kind="pad_shared_memory"), MATMUL) == []
    assert "not a template parameter" in why_not(Action(kind="pad_shared_memory"), MATMUL)
    assert apply(Action(kind="use_tensor_cores"), MATMUL) == []  # no parameter does it: said, not faked
    assert "TF32" in why_not(Action(kind="use_tensor_cores"), MATMUL)


def test_explore_gives_every_in_bounds_neighbour():
    around = explore(ELEMENTWISE)
    assert {"BLOCK": 2048, "num_warps": 8} in around and {"BLOCK": 512, "num_warps": 8} in around
    assert {"BLOCK": 1024, "num_warps": 16} in around and len(around) == 4
    assert all(p != ELEMENTWISE for p in around)


def test_the_proposer_tries_the_parents_actions_first(monkeypatch):
    from pathlib import Path

    from kernelflow.stages.templates import TEMPLATES

    monkeypatch.delitem(TEMPLATES, "inductor")  # the elementwise family's moves alone

    from kernelflow.stages import generate
    from kernelflow.stages.contracts import GenerateRequest
    from kernelflow.stages.problems.kernelbench import load_problem

    problem = load_problem(Path(__file__).resolve().parents[3] / "problems" / "09_silu.py")
    parent = generate.run(GenerateRequest(problem=problem, n=1)).candidates[0]
    plain = generate.run(GenerateRequest(problem=problem, n=1, parent=parent, exclude_ids=[parent.id]))
    acted = generate.run(GenerateRequest(problem=problem, n=2, parent=parent, exclude_ids=[parent.id],
                                         actions=[Action(kind="pad_shared_memory"), Action(kind="increase_ilp")]))
    p = parent.origin.params
    assert [c.origin.params for c in acted.candidates] == apply(Action(kind="increase_ilp"), p)[:2]
    assert plain.candidates[0].origin.params != acted.candidates[0].origin.params
    assert all(c.parent_id == parent.id for c in acted.candidates)
    assert "pad_shared_memory: the templates' shared-memory layout" in acted.message
    assert "increase_ilp: 2 parameter sets" in acted.message


def test_underfed_tensor_cores_deepen_the_pipeline_then_grow_the_tile():
    moves = apply(Action(kind="feed_tensor_cores", params={"num_stages": "+1"}), MATMUL)
    assert moves[:3] == [{**MATMUL, "num_stages": 4}, {**MATMUL, "BLOCK_N": 128}, {**MATMUL, "BLOCK_M": 256}]


def test_raise_precision_splits_attentions_probabilities_and_nothing_else():
    attention = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "split_p": False}
    assert apply(Action(kind="raise_precision"), attention) == [{**attention, "split_p": True}]
    assert apply(Action(kind="raise_precision"), {**attention, "split_p": True}) == []  # already split
    assert apply(Action(kind="raise_precision"), MATMUL) == []
    assert "fp32" in why_not(Action(kind="raise_precision"), MATMUL)
