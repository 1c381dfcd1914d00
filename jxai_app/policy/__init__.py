"""Per-user rules of the Django layer: rate limit and quota, the usage ledger, tool policies,
who may issue API tokens for whom."""
