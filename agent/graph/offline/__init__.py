"""The offline model: a deterministic planner behind a real `BaseChatModel` (bind_tools, token
streaming) that plans calls from the offered tools and the user's words and answers from tool
results in the turn's language. `planner.py` is the model, `rules.py` the word rules it plans
by, `answers.py` how it tells results (like a colleague: counts, titles, ids, environments).

May import: langchain_core only (and agentchat's shared helpers: words; graph/names.py).
"""
