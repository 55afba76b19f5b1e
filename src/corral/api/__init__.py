"""The HTTP API edge: routes convert requests, call the service, convert back."""
