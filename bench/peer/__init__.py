"""The peer of bench/agent_scale.py --peer langgraph: LangGraph Agent Server's side, run from its
own virtualenv (`make peer-langgraph`), never imported by the benchmark's own process."""
