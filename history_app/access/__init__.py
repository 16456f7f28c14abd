"""People and access: projects, roles, bearer tokens, the audit trail, login lockout."""
