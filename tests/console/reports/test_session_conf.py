"""Spark settings from the environment, and shuffles sized to the input."""

from __future__ import annotations

import pytest

from console.reports.jobs.session import conf_from_env, shuffle_partitions


def test_spark_settings_from_a_file_and_variables(tmp_path) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text(
        "# executors\n"
        "spark.executor.memory   2g\n"
        "spark.executor.cores=2\n"
        "\n"
        "spark.sql.shuffle.partitions 64  # fixed by the operator\n"
        "spark.driver.extraJavaOptions -Dlog4j.level=WARN\n"
    )
    env = {
        "SPARK_CONF_FILE": str(conf),
        "SPARK_CONF_spark__executor__memory": "4g",  # a variable wins
        "SPARK_CONF_spark__pyspark__python": "/opt/py/bin/python3",
        "UNRELATED": "x",
    }
    assert conf_from_env(env) == {
        "spark.executor.memory": "4g",
        "spark.executor.cores": "2",
        "spark.sql.shuffle.partitions": "64",
        "spark.driver.extraJavaOptions": "-Dlog4j.level=WARN",
        "spark.pyspark.python": "/opt/py/bin/python3",
    }
    with pytest.raises(ValueError, match="SPARK_CONF_FILE"):
        conf_from_env({"SPARK_CONF_FILE": str(tmp_path / "missing.conf")})


def test_shuffle_partitions_follow_the_input() -> None:
    assert shuffle_partitions(10 << 20) == 8  # small logs: a few
    assert shuffle_partitions(2576 << 20) == 21  # the 2.57 GiB, 1M-message log
    assert shuffle_partitions(1 << 40) == 200  # capped


@pytest.mark.spark
def test_a_local_session_listens_on_loopback_only(spark) -> None:
    """Every TCP port the local Spark JVM listens on is on 127.0.0.1 (it
    listened on the machine's external address on random ports)."""
    import subprocess

    pid = spark.sparkContext._gateway.proc.pid
    out = subprocess.run(
        ["ss", "-Hltnp"], capture_output=True, text=True, check=True
    ).stdout
    mine = [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]
    assert mine, out
    assert all(
        addr.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for addr in mine
    ), mine
