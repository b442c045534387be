"""The reports' own error (no Spark import: the web process catches it)."""


class ReportInputError(Exception):
    """The report's input could not be read as a whole (no store, damaged
    records, an export the driver cannot see): the run fails with this
    message; it never succeeds on partial or empty input."""
