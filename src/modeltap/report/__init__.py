"""Reading the evidence for people: the report (:mod:`~modeltap.report.report`,
typed in :mod:`~modeltap.report.types`, aligned for a terminal in
:mod:`~modeltap.report.text`), ``modeltap check`` (:mod:`~modeltap.report.check`;
its ``--expect`` cases printed by :mod:`~modeltap.report.case_report`) and the
page of ``modeltap view`` (:mod:`~modeltap.report.view`)."""
