"""The audit trail of write and destructive calls (docs/protocol.md §9, the audit route).

decision (policy node, and the re-check of a confirm) → card shown (storage/confirmations.py) →
answer (chat/card_answers.py) → execution (tools node) or why it did not run → one row each in
`audit_rows`, hash-chained at insert time under one advisory lock, the joined record per call
the `audit_records` view (migration 9).

- `chain.py`: canonical JSON, the sidecar's argument digest, a row's hash, the link check
- `store.py`: the SQL: append under the lock, the retention cut, reads in chain order
- `trail.py`: what each site appends, in the domain's words (`AuditTrail`)
- `records.py`: the records GET /api/agent/audit pages, visibility in the SQL
- `export.py`: JSON Lines export, verify a file or the database
- `retention.py`: the retention the sweeper applies (and `agentchat audit prune`)
"""
