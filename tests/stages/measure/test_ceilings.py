"""GPU ceilings measured once per (GPU model, driver) and cached; the table when nothing was measured."""

from pathlib import Path

import pytest

from kernelflow.stages.measure import ceilings
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.peaks import KNOWN_PEAKS, Peaks


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELFLOW_CACHE", str(tmp_path))
    return tmp_path / "peaks"


def fake(dram: float) -> Peaks:
    return KNOWN_PEAKS["NVIDIA H200"].model_copy(update={"dram_bytes_per_s": dram, "source": "stand-in"})


def test_measured_once_then_read_from_the_cache(cache: Path):
    calls = []
    measure = lambda: calls.append(1) or fake(4.1e12)  # noqa: E731
    first = ceilings.for_gpu("NVIDIA H200", "580.159.04", measure)
    again = ceilings.for_gpu("NVIDIA H200", "580.159.04", measure)
    assert first == again and len(calls) == 1 and (cache / "NVIDIA_H200--580.159.04.json").is_file()
    ceilings.for_gpu("NVIDIA H200", "590.1", lambda: fake(4.2e12))  # another driver: measured again
    assert len(list(cache.iterdir())) == 2


def test_peaks_for_prefers_a_cached_measurement_of_that_gpu(cache: Path):
    assert peaks_for("NVIDIA H200") == KNOWN_PEAKS["NVIDIA H200"]  # nothing measured: the table
    assert peaks_for("Some GPU") is None
    ceilings.for_gpu("NVIDIA H200", "580.159.04", lambda: fake(4.1e12))
    assert peaks_for("NVIDIA H200").dram_bytes_per_s == 4.1e12 and peaks_for("NVIDIA H100 80GB HBM3") is None


def test_measure_needs_a_gpu():
    with pytest.raises((RuntimeError, AssertionError, AttributeError)):
        ceilings.measure()
