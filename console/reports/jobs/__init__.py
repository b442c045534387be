"""PySpark jobs over the broker's commit log (first slice of issue 8)."""
