"""``modeltap demo``: a scripted agent and the recording that answers it."""
