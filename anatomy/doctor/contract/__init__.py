"""The call contract found by behaviour: q/k/v roles, mask forms and senses, sequence-first, float islands."""
