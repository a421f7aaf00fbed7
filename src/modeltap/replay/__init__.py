"""Record and replay (SPEC 7): the recording's format
(:mod:`~modeltap.replay.recording`), matching a request to a recorded one
(:mod:`~modeltap.replay.matching`), where two bodies differ
(:mod:`~modeltap.replay.request_diff`) and the stand-in upstream
(:mod:`~modeltap.replay.upstream`)."""
