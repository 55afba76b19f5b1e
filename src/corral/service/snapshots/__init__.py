"""Snapshots: saved sandbox states (memory or files) that new sandboxes restore from; their
export and import as signed archives (``transfer``, ``export_format``, ``trust``) and the capture
of a sandbox's changed files (``fs_capture``)."""
