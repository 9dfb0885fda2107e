"""The report: one self-contained HTML page, built from result data (never recomputing it)."""
