"""``roq kpi``: its arguments are checked before Spark starts; ``--since`` forms."""

from __future__ import annotations

import pytest

from roqcli.main import main
from roq.errors import ConfigError
from roqcli.kpi.job import parse_since

NOW = 1_800_000_000.0


def test_since_takes_durations_and_dates():
    assert parse_since(None) is None and parse_since("") is None
    assert parse_since("30m", NOW) == NOW - 1800 and parse_since("2d", NOW) == NOW - 2 * 86400
    assert parse_since("1.5h", NOW) == NOW - 5400
    assert parse_since("2026-11-23") == 1_795_392_000.0  # midnight UTC
    assert parse_since("2026-11-23T08:00:00+01:00") == 1_795_392_000.0 + 7 * 3600
    with pytest.raises(ConfigError, match="expected e.g. 30m"):
        parse_since("yesterday")


@pytest.mark.parametrize("argv, message", [
    (["kpi", "report"], "no KPI records given"),
    (["kpi", "report", "--archive", ".", "--kpi-queue"], "not both"),
    (["kpi", "report", "--kpi-queue", "no/such"], "bad queue name"),
    (["kpi", "report", "--archive", ".", "--until", "soon"], "--until 'soon': expected e.g. 30m"),
    (["kpi", "tune", "--archive", ".", "--follow", "--until", "1h"], "--follow goes on"),
    (["kpi", "tune", "--archive", "/nonexistent/roq-archive"], "no such KPI archive directory"),
    (["kpi", "tune", "--archive", ".", "--margin", "0.5", "--scale-out-margin", "0.7"],
     "need 0 < --scale-out-margin <= --margin <= 1"),
    (["kpi", "report", "--archive", ".", "--since", "soon"], "expected e.g. 30m"),
    (["kpi", "tune", "--archive", ".", "--follow", "--window", "later"], "expected e.g. 30m"),
])
def test_bad_arguments_are_refused_before_spark_starts(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("ROQ_KPI_ARCHIVE", raising=False)
    assert main(argv) == 3  # ExitCode.CONFIG
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("setting", ["master", "spark.master", "master=local", "spark.master="])
def test_a_spark_setting_is_a_spark_key_and_a_value(setting, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["kpi", "report", "--archive", ".", "--conf", setting])
    assert stopped.value.code == 2 and "expected KEY=VALUE with KEY a Spark setting" in capsys.readouterr().err


class _JavaException:
    def __init__(self, text: str) -> None:
        self.text = text

    def toString(self) -> str:  # noqa: N802 (Java's name, through Py4J)
        return self.text


def _spark_error(module: str, text: str, java: str | None = None) -> Exception:
    kind = type("Failure", (Exception,), {"__module__": module})
    exc = kind(text)
    if java is not None:
        exc.java_exception = _JavaException(java)
    return exc


def test_a_spark_failure_is_told_in_a_line_naming_spark_s_output_and_others_pass_through():
    from roqcli.kpi.job import spark_failure

    missing = spark_failure(_spark_error("py4j.protocol", "", 'java.io.IOException: Cannot run program "/opt/x": '
                                         'error=2\n\tat java.lang.ProcessBuilder.start'), "/tmp/spark.log")
    assert str(missing).startswith('Spark failed: java.io.IOException: Cannot run program "/opt/x": error=2 '
                                   "(PYSPARK_PYTHON") and str(missing).endswith("(its output: /tmp/spark.log)")
    task = spark_failure(_spark_error("pyspark.errors.exceptions.captured", "An exception was thrown from the Python "
                                      "worker.\nTraceback (most recent call last):\n  File x\nValueError: bad"))
    assert str(task) == "Spark failed: An exception was thrown from the Python worker. ... ValueError: bad"
    assert spark_failure(ValueError("ours")) is None
