"""Training the orchestrator: SFT warm start, orchestration-level GRPO, localized counterfactual credit."""
