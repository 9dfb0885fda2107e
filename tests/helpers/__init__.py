"""What several test files share and that is not a fixture: builders of tiny models, hand-made data,
comparison rules (fixtures live in the conftest.py files). Importable as ``helpers`` because pytest
puts tests/ on sys.path when it loads tests/conftest.py; a test file run as a script (a rank of a
multi-process test) puts it there itself."""
