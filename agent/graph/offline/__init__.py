"""The offline model: a deterministic planner behind a real `BaseChatModel` (bind_tools, token
streaming) that plans calls from the offered tools and the user's words and answers from tool
results in the turn's language. `planner.py` is the model, `rules.py` the word rules it plans
by, `answers.py` how it tells results (like a colleague: counts, titles, ids, environments),
`summaries.py` each tool's result, `said.py` the words every sentence is made of,
`upstream_intents.py` which upstream MCP tool a clause names. It reads the
turn's context from the prompt the agent sends (agent/graph/prompt.py), as any model would.

May import: langchain_core only (and agentchat's shared helpers: words; graph/names.py,
graph/prompt.py).
"""
