"""HTTP plumbing of the Django layer: API authentication and the Content Security Policy."""
