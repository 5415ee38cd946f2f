"""kernelflow turns Prefect's client telemetry off with its other defaults (a notice on a terminal's first run
otherwise); a user's own DO_NOT_TRACK stands."""

from pathlib import Path

from kernelflow.cli import kernelflow_defaults


def test_client_telemetry_is_off_unless_the_user_says_otherwise(tmp_path: Path):
    assert kernelflow_defaults({}, tmp_path)["DO_NOT_TRACK"] == "1"
    assert "DO_NOT_TRACK" not in kernelflow_defaults({"DO_NOT_TRACK": "0"}, tmp_path)
