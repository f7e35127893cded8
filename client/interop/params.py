"""The parameters every language sends; they exercise the canonical rule
(100.0 is 100, null members drop, null array items stay)."""

PARAMS = {"order": "A-1", "amount": 100.0, "memo": None, "tags": ["x", None], "payee": {"b": 2, "a": 1}}
