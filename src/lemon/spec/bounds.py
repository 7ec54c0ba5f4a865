"""The spec's bounds, in one place: the schema, the stop criteria (`lemon.spec.stops`) and the JSON schema given to
orchestrators read them from here (`lemon.spec.model` re-exports them).

The bounds live in the schema on purpose: they stop constrained decoding from looping on a tiny model and make
hostile input (huge specs, giant strings) cheap to reject before any work is done. Changing one changes the JSON
schema given to orchestrators.
"""

from __future__ import annotations

MAX_AGENTS = 12
MAX_NAME_LEN = 24
MAX_DUTY_LEN = 300
MAX_SPEC_CHARS = 32_000
# A stop rule's `logprob` gate: nats summed over a reply's tokens, a whole number so that an edit steps it and
# its text is short; -1 is a reply the model was all but certain of, -1000 about 400 uncertain tokens.
MIN_LOGPROB = -1000
MAX_LOGPROB = -1
