"""Tool selection: which tools the model sees for a message (issue 7)."""
