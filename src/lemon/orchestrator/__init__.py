"""Task -> spec: the prompted orchestrator now, the trained policy behind the same interface later."""
