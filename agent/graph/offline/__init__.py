"""The offline model: a deterministic planner behind a real BaseChatModel."""
