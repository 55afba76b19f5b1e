"""Snapshots: saved sandbox states (memory or files) that new sandboxes restore from; their
export and import as signed archives (``transfer``, ``export_format``, ``trust``) and the capture
and restore of a sandbox's changed files (``files``, with the in-sandbox tools of
``fs_capture``).
"""
