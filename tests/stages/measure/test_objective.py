"""Speed first; energy breaks ties inside the noise band; missing energy never decides."""

from kernelflow.stages.measure.objective import Measured, compare


def m(median: float, half: float, energy: float | None = None) -> Measured:
    return Measured(median_us=median, ci_low_us=median - half, ci_high_us=median + half, energy_j_per_call=energy)


def test_clearly_faster_wins_even_if_it_costs_more_energy():
    assert compare(m(100, 1, energy=2.0), m(120, 1, energy=1.0)) == "better"
    assert compare(m(120, 1, energy=1.0), m(100, 1, energy=2.0)) == "worse"


def test_within_noise_lower_energy_wins():
    assert compare(m(100, 3, energy=0.8), m(101, 3, energy=1.0)) == "better"
    assert compare(m(100.5, 0.1, energy=1.0), m(100, 0.1, energy=0.8)) == "worse"  # 0.5% apart: a speed tie


def test_ties_when_energy_is_close_or_unmeasured():
    assert compare(m(100, 3, energy=1.00), m(101, 3, energy=1.01)) == "tie"
    assert compare(m(100, 3), m(101, 3, energy=0.5)) == "tie"
