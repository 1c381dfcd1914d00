"""HTTP plumbing of the Django layer: API authentication, the Content Security Policy, the
websocket Origin check and the client address that login throttling counts."""
