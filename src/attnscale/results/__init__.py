"""The results contract: where each kind of result lives, and the one envelope every producer writes.

Every program that computes (``verify``, the training sweeps, the probes, the benchmarks) writes its
result through :func:`write`; every face (the report, ``--json``) reads it through :func:`read` or
:func:`read_preferred`. Nothing else names a result path.

* **Kinds** (:data:`KINDS`): one table from a kind's name to its place under the results root and the
  fields its data must hold. A family (:data:`USER_FAMILIES`: ``probe/user``, ``rescale/user``) holds
  one kind per model of the user's, ``<family>/<slug>`` (:func:`user_kind`), with the family's fields. A quick run lives apart from a full one (``quick.json`` beside
  ``result.json``), so it never silently replaces it.
* **Envelope**: ``{"schema", "kind", "quick", "created", "config", "seed", "version", "environment",
  "data"}``. ``data`` is the producer's own, everything a face shows (analyses included).
* **Strict JSON** (RFC 8259): NaN and ±inf are refused at write time, naming where they are, so that a
  figure that does not exist is written as ``null`` with a reason beside it (see :func:`finite_or_none`).
  ``jq``, JavaScript's ``JSON.parse`` and every other reader take the files.
* **Atomic** writes (:func:`attnscale.store.write_bytes_atomic`): an interrupted producer leaves the
  old file or the new one, never half of one.
* **Validated** reads: a missing file, a malformed one, a wrong kind or a missing required field is a
  :class:`ResultError` naming the file and the field, raised at read time, not as a broken page later.
  A result may be stored gzip-compressed (``result.json.gz`` beside where ``result.json`` would be):
  :func:`read` opens either.
* **Reference results** (:func:`reference_root`): the full runs shipped with attnscale
  (``src/attnscale/reference_results/<kind>/result.json.gz`` in the repository: only the envelopes, never a sweep's
  cell cache). :func:`read_preferred`, the one choice every face makes, takes the user's own full
  result, else the reference one, else the user's quick one, and the envelope says which
  (:attr:`Envelope.origin`). ``ATTNSCALE_REFERENCE=DIR`` reads the references from DIR instead;
  ``ATTNSCALE_REFERENCE=`` (empty) uses none.

Its parts: :mod:`.kinds` (the table of kinds), :mod:`.files` (the envelope: writing, reading, the references),
:mod:`.strict` (strict JSON), :mod:`.seconds` (what a result records of its time and place). Import
them from here: ``attnscale.results`` is the contract's one name.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> _ = write("demo", {"answer": 42}, config={"n": 1}, seed=0, quick=True, root=root)
    >>> env = read("demo", root=root, quick=True)
    >>> env.data["answer"], env.quick, env.kind
    (42, True, 'demo')
    >>> read_preferred("demo", root=root).quick     # no full result: the quick one, flagged
    True
"""

from __future__ import annotations

from attnscale.results.files import (
    ENVELOPE_FIELDS,
    PACKAGE_REFERENCE,
    REFERENCE_ENV,
    SCHEMA,
    Envelope,
    ResultError,
    ResultMissing,
    check_writable,
    dumps,
    envelope,
    read,
    read_preferred,
    read_reference,
    reference_root,
    shipped_reference,
    stored_path,
    write,
)
from attnscale.results.kinds import (
    DEFAULT_ROOT,
    KINDS,
    USER_FAMILIES,
    Kind,
    cells_dir,
    result_path,
    user_kind,
    user_kinds,
)
from attnscale.results.seconds import CellSeconds, cell_seconds, computed_on, recorded_seconds
from attnscale.results.strict import finite_or_none, nulled_nonfinite, restored_nonfinite, strict_jsonable

__all__ = [
    "DEFAULT_ROOT",
    "SCHEMA",
    "Kind",
    "KINDS",
    "Envelope",
    "ResultError",
    "ResultMissing",
    "USER_FAMILIES",
    "user_kind",
    "user_kinds",
    "result_path",
    "cells_dir",
    "envelope",
    "write",
    "read",
    "read_preferred",
    "dumps",
    "strict_jsonable",
    "finite_or_none",
    "nulled_nonfinite",
    "restored_nonfinite",
    "check_writable",
    "REFERENCE_ENV",
    "reference_root",
    "shipped_reference",
    "read_reference",
    "recorded_seconds",
    "CellSeconds",
    "cell_seconds",
    "computed_on",
    "stored_path",
    "ENVELOPE_FIELDS",
    "PACKAGE_REFERENCE",
]
