"""The executable spec: format and bounds, safe parsing, validation, canonical text with spans, edits."""
