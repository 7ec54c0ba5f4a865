"""Seeing what runs did: stored traces read back (`itemview`, `tracefile`), counterfactual attribution of a
finished run (`explain`), the offline viewer (`view/`) and the exports (OpenTelemetry, Inspect, CSV).

It reads what evaluation (`lemon.evaluation`) and training (`lemon.train`) wrote; nothing below it imports it.
"""
