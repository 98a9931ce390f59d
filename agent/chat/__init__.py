"""The `/chat` handler and its streaming (PROTOCOL §1-§5)."""
