"""The executable spec: format, bounds, parsing, validation, canonical text with spans, counterfactual edits."""
