"""The vocabulary and the pure rules: refusal rules and the exception tree
(:mod:`~modeltap.rules.errors`), whose fault a failure was
(:mod:`~modeltap.rules.failures`), routes and the provider hosts
(:mod:`~modeltap.rules.routing`), and where it may listen
(:mod:`~modeltap.rules.listening`)."""
