"""Generated envd protocol code (scripts/gen-e2b-proto)."""
