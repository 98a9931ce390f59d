"""The LangGraph agent and its runtime: nodes, the model, the tool runtime, the policy client
and the service token."""
