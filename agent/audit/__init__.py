"""The audit trail of write and destructive calls (issue 20).

decision (policy node, and the re-check of a confirm) → card shown (confirmations.py) →
answer (ChatService) → execution (tools node) or why it did not run → one row each in
`audit_rows`, hash-chained at insert time under one advisory lock (`store.py`, hashes in
`chain.py`); the joined record per call is the `audit_records` view (`records.py`, served by
GET /api/agent/audit); `export.py` writes JSON Lines and verifies a file or the database.
"""
