"""The evidence: the one schema of the lines (:mod:`~modeltap.evidence.records`;
the JSON Schemas generated from it, :mod:`~modeltap.evidence.schemas`), what of a
path may be written (:mod:`~modeltap.evidence.redaction`), the one place that
writes files (:mod:`~modeltap.evidence.sink`), and what is
derived from the lines: cost estimates (:mod:`~modeltap.evidence.cost`), which
request answers a tool call (:mod:`~modeltap.evidence.pairing`), evidence
coverage (:mod:`~modeltap.evidence.coverage`), the lines read back
(:mod:`~modeltap.evidence.capture`), a ``--record`` directory read back
(:mod:`~modeltap.evidence.recordings`, and its output text:
:mod:`~modeltap.evidence.recorded_output`), and the verdicts judged over all
of it (:mod:`~modeltap.evidence.verdicts`)."""
